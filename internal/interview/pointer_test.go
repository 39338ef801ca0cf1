package interview

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

const routerSrc = `package router

type Router struct{}

func (r *Router) Stream() {}

func New() *Router { return nil }

var ErrClosed error

const AutoModel = "auto"
`

const routerTest = `package router

import "testing"

func TestStreamFallsBack(t *testing.T) {}

func TestStreamEndsWithDone(t *testing.T) {}
`

func TestPointersAreFoundInProse(t *testing.T) {
	ps := Pointers("See `gateway/router/router.go` `Router.Stream`, `New` and `gateway/router/router.go`; " +
		"run `go test -race -run 'TestStream' ./gateway/router/` or `go test -run '^TestX$' ./gateway/router`. " +
		"Not `router.go` alone, nor `make test`; `gateway/router/router.go`, `plan.go` is two files.")
	require.Len(t, ps, 5)
	assert.Equal(t, Pointer{Path: "gateway/router/router.go", Idents: []string{"Router.Stream", "New"}}, ps[0])
	assert.Equal(t, Pointer{Path: "gateway/router/router.go"}, ps[1])
	assert.Equal(t, Pointer{Path: "gateway/router/router.go"}, ps[2], "a file name is not a declaration")
	assert.Equal(t, Pointer{Path: "gateway/router", Run: "TestStream"}, ps[3])
	assert.Equal(t, Pointer{Path: "gateway/router", Run: "^TestX$"}, ps[4])
	assert.Equal(t, "gateway/router/router.go Router.Stream, New", ps[0].String())
	assert.Equal(t, "go test -run 'TestStream' ./gateway/router/", ps[3].String())
}

func TestPointersResolveAgainstTheCode(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "gateway/router/router.go", routerSrc)
	writeFile(t, root, "gateway/router/router_test.go", routerTest)
	writeFile(t, root, "docs/x.md", "# x\n")
	good := []Pointer{
		{Path: "gateway/router/router.go"},
		{Path: "gateway/router/router.go", Idents: []string{"Router", "Router.Stream", "New", "ErrClosed", "AutoModel"}},
		{Path: "docs/x.md"},
		{Path: "gateway/router", Run: "TestStream"},
		{Path: "gateway/router", Run: "^TestStreamFallsBack$|^TestStreamEndsWithDone$"},
		{Path: "gateway/router", Run: "TestStream/subtest"},
		{Path: "gateway/router", Run: "^$"}, // a benchmark's command runs no test
	}
	for _, p := range good {
		assert.NoError(t, p.Resolve(root), p.String())
	}
	bad := map[string]Pointer{
		"no such file":                      {Path: "gateway/router/gone.go"},
		"declares no Router.Generate":       {Path: "gateway/router/router.go", Idents: []string{"Router.Generate"}},
		"declares no Stream":                {Path: "gateway/router/router.go", Idents: []string{"Stream"}},
		"not a Go file":                     {Path: "docs/x.md", Idents: []string{"X"}},
		"no test in gateway/router matches": {Path: "gateway/router", Run: "TestRetries"},
		"matches ^TestGone$":                {Path: "gateway/router", Run: "^TestStreamFallsBack$|^TestGone$"},
		"no test files":                     {Path: "docs", Run: "TestX"},
		"missing closing":                   {Path: "gateway/router", Run: "TestStream("},
		"no such file or directory":         {Path: "gateway/nowhere", Run: "TestX"},
	}
	for want, p := range bad {
		err := p.Resolve(root)
		if assert.Error(t, err, p.String()) {
			assert.Contains(t, err.Error(), want)
		}
	}
}
