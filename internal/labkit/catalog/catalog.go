// Package catalog is what labctl knows of the course's labs, the bottom of
// its packages: the catalogue (labs/catalog.json), which of each lab's two
// tracks a checkout holds (Track), each lab's tests — the learner's copy,
// the pristine ones (in solutions/, or a template's archive) — and its hints
// and how far they were revealed.
//
// A lab is a numbered pair of packages, labs/NN-topic (the learner's stub) and
// solutions/NN-topic (the reference), whose *_test.go files are byte-identical.
// Everything labctl does is a statement about that pair.
//
// The other packages of internal/labkit build on this one (see
// internal/labkit/doc.go): gotest runs the tests, checklist judges the
// production-readiness checklist, mutation applies a lab's classic bugs,
// write scores the learner's tests by them, verify checks the labs keep the
// conventions, grade grades, and export writes a learner template.
package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// catalogFile is where the lab catalogue lives, relative to the repository root.
const catalogFile = "labs/catalog.json"

// ErrUnknownLab is returned when a lab number or name matches no catalogue entry.
var ErrUnknownLab = errors.New("unknown lab")

// Lab is one catalogue entry.
type Lab struct {
	Number  string `json:"number"`  // "01"
	Dir     string `json:"dir"`     // "01-concurrency", the same under labs/ and solutions/
	Package string `json:"package"` // Go package name
	Title   string `json:"title"`
	Hints   string `json:"hints"` // hints file inside the lab directory
	Issue   int    `json:"issue"` // the issue that builds it, for "not built yet" messages

	built bool
	kit   bool
}

// Built reports whether the stub directory exists and its pristine tests
// can be found: the solution directory, or a template's pristine archive.
// It is the labs track of the lab.
func (l Lab) Built() bool { return l.built }

// Writable reports whether the lab's test-writing track is here: its
// reference in solutions/, or a template's kit archive.
func (l Lab) Writable() bool { return l.kit }

// LabDir is the learner's directory, relative to the root.
func (l Lab) LabDir() string { return filepath.Join("labs", l.Dir) }

// SolutionDir is the reference directory, relative to the root.
func (l Lab) SolutionDir() string { return filepath.Join("solutions", l.Dir) }

// Catalog is the list of labs, in order, rooted at a repository checkout.
type Catalog struct {
	Root string `json:"-"`
	Labs []Lab  `json:"labs"`
}

// Load reads the catalogue under root and marks which labs are built.
func Load(root string) (*Catalog, error) {
	data, err := os.ReadFile(filepath.Join(root, catalogFile))
	if err != nil {
		return nil, fmt.Errorf("read lab catalogue: %w", err)
	}
	c := &Catalog{Root: root}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", catalogFile, err)
	}
	kit := kitLabs(root)
	for i := range c.Labs {
		l := &c.Labs[i]
		if l.Number == "" || l.Dir == "" || l.Package == "" {
			return nil, fmt.Errorf("%s: entry %d needs number, dir and package", catalogFile, i+1)
		}
		l.built = labfs.IsDir(filepath.Join(root, l.LabDir())) && hasPristine(root, *l)
		l.kit = labfs.IsDir(filepath.Join(root, l.SolutionDir())) || kit[l.Dir]
		if l.Hints == "" {
			l.Hints = "HINTS.md"
		}
	}
	return c, nil
}

// Find returns the lab named by its number ("3", "03") or directory ("03-timeouts").
func (c *Catalog) Find(name string) (Lab, error) {
	name = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(name, "labs/"), "lab-"))
	name = strings.TrimSuffix(name, "/")
	if len(name) == 1 && name[0] >= '0' && name[0] <= '9' {
		name = "0" + name
	}
	for _, l := range c.Labs {
		if l.Number == name || l.Dir == name {
			return l, nil
		}
	}
	valid := make([]string, 0, len(c.Labs))
	for _, l := range c.Labs {
		valid = append(valid, l.Number+" ("+l.Dir+")")
	}
	return Lab{}, fmt.Errorf("%w %q; valid labs: %s", ErrUnknownLab, name, strings.Join(valid, ", "))
}

// BuiltLabs returns the labs whose directories exist, in catalogue order.
func (c *Catalog) BuiltLabs() []Lab {
	return slices.DeleteFunc(slices.Clone(c.Labs), func(l Lab) bool { return !l.built })
}

// WriteLabs returns the labs whose test-writing track is here, in
// catalogue order.
func (c *Catalog) WriteLabs() []Lab {
	return slices.DeleteFunc(slices.Clone(c.Labs), func(l Lab) bool { return !l.kit })
}

// Holds says which tracks the checkout holds: the course repository both,
// a template one.
func (c *Catalog) Holds(t Track) bool {
	switch t {
	case TrackLabs:
		return len(c.BuiltLabs()) > 0
	case TrackWrite:
		return len(c.WriteLabs()) > 0
	}
	return false
}

// LabsOrBuilt returns labs, or every built lab of the catalogue under root when labs is nil.
func LabsOrBuilt(root string, labs []Lab) ([]Lab, error) {
	if labs != nil {
		return labs, nil
	}
	c, err := Load(root)
	if err != nil {
		return nil, err
	}
	return c.BuiltLabs(), nil
}

// Select resolves lab names to catalogue entries; no names means every built
// lab. A lab that is not built yet is an error naming the issue that brings it.
func (c *Catalog) Select(names []string) ([]Lab, error) {
	if len(names) == 0 {
		return c.BuiltLabs(), nil
	}
	return c.resolve(names, func(l Lab) error {
		switch {
		case l.Built():
			return nil
		case c.Holds(TrackWrite) && !c.Holds(TrackLabs):
			return fmt.Errorf("%w: this is the test-writing template: lab %s's stubs and exercise tests are not in it (its track here: make write-%s)", ErrOtherTrack, l.Number, l.Number)
		}
		return fmt.Errorf("lab %s (%s) is not built yet: it arrives with issue #%d", l.Number, l.Title, l.Issue)
	})
}

// SelectAny resolves lab names to labs of which either track is here.
func (c *Catalog) SelectAny(names []string) ([]Lab, error) {
	return c.resolve(names, func(l Lab) error {
		if !l.Built() && !l.Writable() {
			return fmt.Errorf("lab %s (%s) is not here: neither its stubs nor its test-writing track", l.Number, l.Title)
		}
		return nil
	})
}

// ErrBadOption is wrapped by errors in the options a caller passed (a
// --tests path that is not a directory): labctl exits 2 on them.
var ErrBadOption = errors.New("bad option")

// ErrOtherTrack means the command belongs to the track this template does
// not hold.
var ErrOtherTrack = errors.New("not in this template")

// SelectWrite resolves lab names to labs whose test-writing track is
// here; no names means all of them.
func (c *Catalog) SelectWrite(names []string) ([]Lab, error) {
	if !c.Holds(TrackWrite) {
		return nil, fmt.Errorf("%w: this is the labs template; the test-writing track (make write-NN) is a template of its own, which your instructor exports with labctl export -track write", ErrOtherTrack)
	}
	if len(names) == 0 {
		return c.WriteLabs(), nil
	}
	return c.resolve(names, func(l Lab) error {
		if !l.Writable() {
			return fmt.Errorf("lab %s (%s) has no test-writing track here", l.Number, l.Title)
		}
		return nil
	})
}

// resolve finds each named lab and asks here whether it may be used.
func (c *Catalog) resolve(names []string, here func(Lab) error) ([]Lab, error) {
	var labs []Lab
	for _, name := range names {
		l, err := c.Find(name)
		if err != nil {
			return nil, err
		}
		if err := here(l); err != nil {
			return nil, err
		}
		labs = append(labs, l)
	}
	return labs, nil
}

// FindRoot walks up from dir to the first directory holding the catalogue.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, catalogFile)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s in %s or any parent: run labctl inside the lab repository", catalogFile, dir)
		}
	}
}

// kitLabs lists the lab directories a template's kit archive holds; none
// where there is no archive (or one that does not read: the write command
// says why).
func kitLabs(root string) map[string]bool {
	data, err := os.ReadFile(filepath.Join(root, KitArchive))
	if err != nil {
		return nil
	}
	all, err := ReadKitArchive(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	labs := map[string]bool{}
	for dir := range all {
		labs[dir] = true
	}
	return labs
}
