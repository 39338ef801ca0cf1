package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// cacheDir is where labctl keeps verify's verdicts, relative to the root
// (ignored by git; `make clean` removes it).
const cacheDir = ".labctl/verify-cache"

// cacheSchema changes whenever the way a verdict is reached changes, so old
// verdicts are not trusted by a newer labctl.
const cacheSchema = "verify-verdict-v3"

// verifyCache remembers verdicts whose inputs have not changed: a stub that
// failed every test, a lab whose tests are black-box, a mutant that was
// killed. A key covers everything the check reads: the files of the package
// and of every package of this module its test build imports (the files in
// each directory and under its testdata/, mutant patches aside), go.mod and
// go.sum, the Go version, platform and flags, and for a mutant its patch.
// Only clean verdicts are stored, so a problem is always found afresh. A nil
// cache remembers nothing.
type verifyCache struct {
	root string
	dir  string
	base string              // the Go environment, flags, go.mod and go.sum
	deps map[string][]string // package dir → module dirs its test build reads

	mu     sync.Mutex
	hashes map[string]string // dir → hash of its files
}

// openCache prepares the keys for the labs; when it cannot (go list fails),
// verify goes on without a cache and says so.
func (v *verifier) openCache(ctx context.Context, labs []catalog.Lab) *verifyCache {
	var dirs []string
	for _, l := range labs {
		dirs = append(dirs, l.LabDir(), l.SolutionDir())
	}
	c, err := newVerifyCache(ctx, v.Root, dirs, !v.NoRace)
	if err != nil {
		v.logf("verify: no verdict cache this run: %v", err)
		return nil
	}
	return c
}

func newVerifyCache(ctx context.Context, root string, dirs []string, race bool) (*verifyCache, error) {
	goenv, err := labfs.GoOutput(ctx, root, "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\nrace=%t\n%s", cacheSchema, race, goenv)
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := labfs.HashFile(h, root, f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err // a module without dependencies has no go.sum
		}
	}
	deps, err := localTestDeps(ctx, root, dirs)
	if err != nil {
		return nil, err
	}
	return &verifyCache{root: root, dir: filepath.Join(root, cacheDir), base: hex.EncodeToString(h.Sum(nil)),
		deps: deps, hashes: map[string]string{}}, nil
}

// localTestDeps maps each package directory to the directories (relative to
// root) of the packages of this module its test binary is built from,
// itself included, in one go list.
func localTestDeps(ctx context.Context, root string, dirs []string) (map[string][]string, error) {
	args := []string{"list", "-deps", "-test", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .Deps \" \"}}"}
	for _, d := range dirs {
		args = append(args, "./"+filepath.ToSlash(d))
	}
	out, err := labfs.GoOutput(ctx, root, args...)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real // go list reports directories by their real paths
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
	deps := map[string][]string{}
	for dir, imports := range testDeps {
		own, err := filepath.Rel(root, dir)
		if err != nil {
			continue
		}
		set := []string{own}
		for _, imp := range imports {
			path, _, _ := strings.Cut(imp, " ")
			rel, err := filepath.Rel(root, dirOf[path])
			if err == nil && dirOf[path] != "" && !strings.HasPrefix(rel, "..") && !slices.Contains(set, rel) {
				set = append(set, rel)
			}
		}
		slices.Sort(set)
		deps[own] = set
	}
	return deps, nil
}

// key names a verdict of kind on the packages in pkgDirs (and what their
// tests import), plus extra input such as a patch. "" when a package's
// sources cannot be read: that verdict is not cached.
func (c *verifyCache) key(kind string, pkgDirs []string, extra []byte) string {
	if c == nil {
		return ""
	}
	var dirs []string
	for _, p := range pkgDirs {
		deps, ok := c.deps[filepath.Clean(p)]
		if !ok {
			return ""
		}
		dirs = append(dirs, deps...)
	}
	slices.Sort(dirs)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", c.base, kind)
	for _, d := range slices.Compact(dirs) {
		dh, err := c.dirHash(d)
		if err != nil {
			return ""
		}
		fmt.Fprintf(h, "%s\x00%s\x00", d, dh)
	}
	h.Write(extra)
	return kind + "-" + hex.EncodeToString(h.Sum(nil))
}

// dirHash hashes the files directly in dir and everything under its
// testdata/ but the mutant patches (each mutant's key has its own patch).
func (c *verifyCache) dirHash(dir string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.hashes[dir]; ok {
		return h, nil
	}
	h := sha256.New()
	abs := filepath.Join(c.root, dir)
	testdata := filepath.Join(abs, "testdata")
	err := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != abs && p != testdata && !strings.HasPrefix(p, testdata+string(filepath.Separator)):
			return filepath.SkipDir // another package's directory
		case d.IsDir() && p == filepath.Join(testdata, "mutants"):
			return filepath.SkipDir
		case d.Type().IsRegular():
			rel, _ := filepath.Rel(c.root, p)
			return labfs.HashFile(h, c.root, rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	c.hashes[dir] = hex.EncodeToString(h.Sum(nil))
	return c.hashes[dir], nil
}

// get loads the verdict stored under key into v.
func (c *verifyCache) get(key string, v any) bool {
	if c == nil {
		return false
	}
	return labfs.LoadJSON(c.dir, key, v)
}

// put stores a verdict; a failed write only costs a rerun next time.
func (c *verifyCache) put(key string, v any) {
	if c == nil {
		return
	}
	labfs.StoreJSON(c.dir, key, v)
}
