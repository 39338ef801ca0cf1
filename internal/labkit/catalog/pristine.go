package catalog

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// PristineArchive is where a learner template (labctl export) keeps the
// pristine test files, relative to the root: a gzipped tar holding
// NN-topic/name_test.go for every lab. The upstream repository has no such
// file; its pristine tests are the solutions' own test files.
//
// An archive rather than a directory of .go files: the go tool, gopls and
// grep do not see it, so a learner does not find every test twice or edit
// the wrong copy, and changing it takes a deliberate act.
const PristineArchive = "labs/pristine-tests.tar.gz"

// ErrNoPristineTests means neither solutions/NN-topic nor the pristine
// archive holds a lab's tests.
var ErrNoPristineTests = errors.New("no pristine tests")

// maxPristineBytes bounds what reading the archive may inflate to.
const maxPristineBytes = 16 << 20

// PristineTests returns a lab's pristine test files, base name → content:
// the solution's *_test.go files where solutions/ exists (the upstream
// repository), else the lab's entries in the pristine archive (a template).
func PristineTests(root string, l Lab) (map[string][]byte, error) {
	if labfs.IsDir(filepath.Join(root, l.SolutionDir())) {
		return ReadTestSources(filepath.Join(root, l.SolutionDir()))
	}
	data, err := os.ReadFile(filepath.Join(root, PristineArchive))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w for lab %s: neither %s nor %s exists", ErrNoPristineTests, l.Number, l.SolutionDir(), PristineArchive)
	}
	if err != nil {
		return nil, err
	}
	return labFromArchive(data, l, PristineArchive)
}

// PristineTestsAt is PristineTests as of a git revision: solutions/NN-topic
// at ref when it has test files there, else the pristine archive at ref.
// A template fork graded against its template's commit takes the tests
// from there, whatever the fork did to its own copy.
func PristineTestsAt(ctx context.Context, root, ref string, l Lab) (map[string][]byte, error) {
	files, err := labfs.GitFiles(ctx, root, ref, l.SolutionDir(), func(name string) bool { return strings.HasSuffix(name, "_test.go") })
	if err != nil || len(files) > 0 {
		return files, err
	}
	data, err := labfs.GitOutput(ctx, root, "show", ref+":"+PristineArchive)
	if err != nil {
		return nil, fmt.Errorf("%w for lab %s at %s: neither %s nor %s is there", ErrNoPristineTests, l.Number, ref, l.SolutionDir(), PristineArchive)
	}
	return labFromArchive(data, l, ref+":"+PristineArchive)
}

// hasPristine reports whether a lab's pristine tests can be found under
// root without git: the solution directory or the template's archive.
func hasPristine(root string, l Lab) bool {
	if labfs.IsDir(filepath.Join(root, l.SolutionDir())) {
		return true
	}
	_, err := os.Stat(filepath.Join(root, PristineArchive))
	return err == nil
}

func labFromArchive(data []byte, l Lab, from string) (map[string][]byte, error) {
	all, err := readPristineArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", from, err)
	}
	files, ok := all[l.Dir]
	if !ok || len(files) == 0 {
		return nil, fmt.Errorf("%w for lab %s in %s", ErrNoPristineTests, l.Number, from)
	}
	return files, nil
}

// WritePristineArchive writes labs (lab directory → base name → content)
// as a gzipped tar. The bytes depend only on the files: entries sorted, no
// times, owners or names in the headers, so exporting the same tests twice
// gives the same archive and a template's history shows only real changes.
func WritePristineArchive(w io.Writer, labs map[string]map[string][]byte) error {
	flat := map[string][]byte{}
	for dir, files := range labs {
		for name, content := range files {
			flat[dir+"/"+name] = content
		}
	}
	return writeArchive(w, flat, checkPristineName)
}

// readPristineArchive reads an archive WritePristineArchive wrote. It
// accepts only regular files named NN-topic/name_test.go, so a doctored
// archive cannot write or shadow anything else.
func readPristineArchive(r io.Reader) (map[string]map[string][]byte, error) {
	flat, err := readArchive(r, maxPristineBytes, checkPristineName)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string][]byte{}
	for p, content := range flat {
		dir, name := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		if out[dir] == nil {
			out[dir] = map[string][]byte{}
		}
		out[dir][name] = content
	}
	return out, nil
}

// writeArchive writes files (slash path → content) as a gzipped tar,
// entries sorted, with nothing in the headers but name, mode and size;
// every name must pass check.
func writeArchive(w io.Writer, files map[string][]byte, check func(string) error) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := check(name); err != nil {
			return err
		}
		content := files[name]
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content)), Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// readArchive reads a gzipped tar of regular files, at most limit bytes
// inflated, each name passing check and appearing once.
func readArchive(r io.Reader, limit int64, check func(string) error) (map[string][]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	tr := tar.NewReader(io.LimitReader(zr, limit))
	out := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("entry %q is not a regular file", hdr.Name)
		}
		if err := check(hdr.Name); err != nil {
			return nil, err
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		if _, dup := out[hdr.Name]; dup {
			return nil, fmt.Errorf("entry %q appears twice", hdr.Name)
		}
		out[hdr.Name] = content
	}
}

// checkPristineName accepts exactly "dir/name_test.go" with plain names.
func checkPristineName(p string) error {
	dir, name := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	ok := dir != "" && !strings.ContainsAny(dir, `/\`) && dir != "." && dir != ".." &&
		strings.HasSuffix(name, "_test.go") && !strings.ContainsAny(name, `/\`)
	if !ok {
		return fmt.Errorf("entry %q is not lab-directory/name_test.go", p)
	}
	return nil
}
