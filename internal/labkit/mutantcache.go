package labkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CacheDir is where labctl keeps the verdicts of mutants it has run,
// relative to the root (ignored by git; `make clean` removes it).
const CacheDir = ".labctl/verify-cache"

// cacheSchema changes whenever the way a verdict is reached changes, so old
// verdicts are not trusted by a newer labctl.
const cacheSchema = "mutant-verdict-v1"

// mutantCache remembers the verdict on a mutant whose inputs have not
// changed. The key covers everything the run reads: the patch; every file of
// the lab's solution and of each package of this module its tests import;
// go.mod and go.sum; the Go version, platform and flags. Only clean kills
// are kept: a survivor, a broken patch or a kill that could not be checked
// for want of Redis runs again next time. A nil cache keeps nothing.
type mutantCache struct {
	dir  string
	base string            // hash of the Go environment, flags and go.mod/go.sum
	labs map[string]string // lab dir → hash of the sources its test build reads
}

// openCache prepares the keys for every lab; when it cannot (go list fails),
// verify goes on without a cache and says so.
func (v *verifier) openCache(ctx context.Context, reports []LabReport) *mutantCache {
	c, err := newMutantCache(ctx, v.Root, reports, !v.NoRace)
	if err != nil {
		v.logf("verify: no mutant cache this run: %v", err)
		return nil
	}
	return c
}

func newMutantCache(ctx context.Context, root string, reports []LabReport, race bool) (*mutantCache, error) {
	goenv, err := goOutput(ctx, root, "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\nrace=%t\n%s", cacheSchema, race, goenv)
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, root, f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err // a module without dependencies has no go.sum
		}
	}
	c := &mutantCache{dir: filepath.Join(root, CacheDir), base: hex.EncodeToString(h.Sum(nil)), labs: map[string]string{}}
	deps, err := localTestDeps(ctx, root, reports)
	if err != nil {
		return nil, err
	}
	for _, r := range reports {
		sol := r.Lab.SolutionDir()
		lh, err := hashSources(root, sol, deps[filepath.Join(root, sol)])
		if err != nil {
			return nil, err
		}
		c.labs[sol] = lh
	}
	return c, nil
}

// localTestDeps maps each solution's directory to the directories of the
// packages of this module its test binary is built from (itself included).
func localTestDeps(ctx context.Context, root string, reports []LabReport) (map[string][]string, error) {
	args := []string{"list", "-deps", "-test", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .Deps \" \"}}"}
	for _, r := range reports {
		args = append(args, "./"+filepath.ToSlash(r.Lab.SolutionDir()))
	}
	out, err := goOutput(ctx, root, args...)
	if err != nil {
		return nil, err
	}
	dirOf := map[string]string{}
	testDeps := map[string][]string{} // test main's dir → its deps' import paths
	for line := range strings.Lines(string(out)) {
		f := strings.SplitN(strings.TrimRight(line, "\n"), "\t", 3)
		if len(f) < 3 {
			continue
		}
		path, _, _ := strings.Cut(f[0], " ") // "p [p.test]" is p, compiled with its tests
		dirOf[path] = f[1]
		if strings.HasSuffix(f[0], ".test") {
			testDeps[f[1]] = strings.Fields(f[2])
		}
	}
	inModule := root + string(filepath.Separator)
	deps := map[string][]string{}
	for dir, imports := range testDeps {
		set := []string{dir}
		for _, imp := range imports {
			path, _, _ := strings.Cut(imp, " ")
			if d := dirOf[path]; strings.HasPrefix(d, inModule) && !slices.Contains(set, d) {
				set = append(set, d)
			}
		}
		slices.Sort(set)
		deps[dir] = set
	}
	return deps, nil
}

// hashSources hashes the solution directory (all of it but the mutants) and
// the files directly in each dependency's directory.
func hashSources(root, solution string, depDirs []string) (string, error) {
	h := sha256.New()
	solDir := filepath.Join(root, solution)
	mutants := filepath.Join(solDir, "testdata", "mutants")
	err := filepath.WalkDir(solDir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p == mutants:
			return filepath.SkipDir
		case d.Type().IsRegular():
			rel, _ := filepath.Rel(root, p)
			return hashFile(h, root, rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, dir := range depDirs {
		if dir == solDir {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				rel, _ := filepath.Rel(root, filepath.Join(dir, e.Name()))
				if err := hashFile(h, root, rel); err != nil {
					return "", err
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile adds a file's name and content to h.
func hashFile(h hash.Hash, root, rel string) error {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(b))
	h.Write(b)
	return nil
}

func (c *mutantCache) key(l Lab, patch []byte) string {
	if c == nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", c.base, c.labs[l.SolutionDir()])
	h.Write(patch)
	return hex.EncodeToString(h.Sum(nil))
}

func (c *mutantCache) get(key string) (MutantResult, bool) {
	if c == nil {
		return MutantResult{}, false
	}
	b, err := os.ReadFile(filepath.Join(c.dir, key+".json"))
	if err != nil {
		return MutantResult{}, false
	}
	var m MutantResult
	if json.Unmarshal(b, &m) != nil || !m.Killed {
		return MutantResult{}, false
	}
	return m, true
}

func (c *mutantCache) put(key string, m MutantResult) {
	if c == nil || !m.Killed || m.Problem != "" || len(m.Unchecked) > 0 {
		return
	}
	b, err := json.Marshal(m)
	if err != nil || os.MkdirAll(c.dir, 0o755) != nil {
		return
	}
	tmp := filepath.Join(c.dir, key+".tmp")
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(c.dir, key+".json")) // a cache: a failed write costs a rerun, nothing more
	}
}

func goOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return commandOutput(ctx, root, "go", args...)
}
