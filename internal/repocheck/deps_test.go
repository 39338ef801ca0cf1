package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// TestModulesVerifyAgainstGoSum runs `go mod verify`: every module in the
// cache is what go.sum says it was when it was added.
func TestModulesVerifyAgainstGoSum(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "go", "mod", "verify")
	cmd.Dir = root(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go mod verify:\n%s", out)
	assert.Contains(t, string(out), "all modules verified")
}

// TestToolsArePinnedInGoMod: every `go tool X` the Makefile, scripts and
// workflows run is a tool directive in go.mod (so go.sum pins it), and none
// of them installs or runs anything at @latest or @version outside go.mod.
func TestToolsArePinnedInGoMod(t *testing.T) {
	r := root(t)
	data, err := os.ReadFile(filepath.Join(r, "go.mod"))
	require.NoError(t, err)
	mf, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	tools := map[string]bool{}
	for _, tl := range mf.Tool {
		tools[filepath.Base(tl.Path)] = true
	}
	require.NotEmpty(t, tools, "go.mod declares its tools")

	files := []string{"Makefile"}
	for _, glob := range []string{"scripts/*", ".github/workflows/*.yml"} {
		m, err := filepath.Glob(filepath.Join(r, glob))
		require.NoError(t, err)
		for _, f := range m {
			if fi, err := os.Stat(f); err != nil || fi.IsDir() {
				continue
			}
			rel, _ := filepath.Rel(r, f)
			files = append(files, rel)
		}
	}
	goTool := regexp.MustCompile(`\bgo tool ([a-z][a-z0-9-]*)`)
	unpinned := regexp.MustCompile(`\bgo (install|run|get) [^\s]+@`)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(r, f))
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.ReplaceAll(line, "$(GO)", "go")
			for _, m := range goTool.FindAllStringSubmatch(line, -1) {
				if m[1] == "cover" || m[1] == "pprof" || m[1] == "trace" || m[1] == "test2json" || m[1] == "covdata" {
					continue // the go command's own tools
				}
				assert.True(t, tools[m[1]], "%s:%d runs go tool %s, which is not a tool directive in go.mod", f, i+1, m[1])
			}
			assert.False(t, unpinned.MatchString(line), "%s:%d fetches a module by version outside go.mod: %s", f, i+1, strings.TrimSpace(line))
		}
	}
}

// TestWorkflowActionsArePinnedToCommits: a tag can be moved by whoever
// controls the action's repository; a commit SHA cannot.
func TestWorkflowActionsArePinnedToCommits(t *testing.T) {
	r := root(t)
	wfs, err := filepath.Glob(filepath.Join(r, ".github/workflows/*.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, wfs)
	uses := regexp.MustCompile(`^\s*(?:-\s*)?uses:\s*([^\s#]+)`)
	sha := regexp.MustCompile(`@[0-9a-f]{40}$`)
	var n int
	for _, wf := range wfs {
		b, err := os.ReadFile(wf)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			m := uses.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(m[1], "./") || strings.HasPrefix(m[1], "docker://") {
				continue
			}
			n++
			assert.Regexp(t, sha, m[1], "%s:%d: pin %s to a commit SHA (and say the tag in a comment)", filepath.Base(wf), i+1, m[1])
		}
	}
	assert.Positive(t, n, "the workflows use at least one action")
}
