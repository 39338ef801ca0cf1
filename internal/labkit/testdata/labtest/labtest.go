// Package labtest is what the tests of labkit's packages share: a tiny lab
// repository to run labctl's checks against (internal/labkit/testdata/fixture,
// its own module with no dependencies: lab 01-add, whose one mutant makes Sum
// skip the first number), files written into a copy of it, and learner test
// suites for its test-writing track.
//
// Only tests import it, and it lives under testdata/ for what that does:
// the go tool's ./... patterns skip it, and so does a learner template,
// which holds labctl's packages without their tests.
package labtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/stretchr/testify/require"
)

// Fixture copies the fixture repository into a temporary directory, so
// each test can break it in its own way. Tests run in their package's
// directory, one below internal/labkit, where the fixture is.
func Fixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("../testdata/fixture")))
	return dst
}

// Write writes content to root/rel.
func Write(t *testing.T, root, rel, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
}

// FixtureLab is the fixture's one built lab, 01-add.
func FixtureLab(t *testing.T, root string) catalog.Lab {
	t.Helper()
	c, err := catalog.Load(root)
	require.NoError(t, err)
	return c.BuiltLabs()[0]
}

// HintSection is one hint, as HINTS.md writes it, for the named tests.
func HintSection(title, tests string) string {
	return "## " + title + "\nTests: " + tests + "\n\n### Nudge\nWhere do you look?\n\n### Approach\nIn words, the idea.\n\n### Near-solution\n```go\nreturn 1\n```\n"
}

// SolveAdd makes the fixture's Add work and leaves Sum a stub.
func SolveAdd(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "labs/01-add/add.go"))
	require.NoError(t, err)
	Write(t, root, "labs/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int { return 0 }", "func Add(a, b int) int { return a + b }", 1))
}

// Learner suites for the fixture's test-writing track: KillsSkipsFirst
// kills its shipped mutant; OnlyAdd reaches only Add, so kills nothing
// shipped.
const (
	KillsSkipsFirst = `package add

import "testing"

func TestSumCountsTheFirstNumber(t *testing.T) {
	if got := Sum(5, 1); got != 6 {
		t.Errorf("Sum(5, 1) = %d, want 6", got)
	}
}
`
	OnlyAdd = `package add

import "testing"

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Error("Add(1, 2) != 3")
	}
}
`
)

// HeldBackBank is an instructor's bank of one mutant for the fixture lab,
// Add subtracts, in a temporary directory; header is the patch's comment.
func HeldBackBank(t *testing.T, header string) string {
	t.Helper()
	bank := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(bank, "01-add"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bank, "01-add", "add-subtracts.patch"), []byte(header+`
--- a/add.go
+++ b/add.go
@@ -4,4 +4,4 @@
 package add
 
 // Add returns a+b.
-func Add(a, b int) int { return a + b }
+func Add(a, b int) int { return a - b }
`), 0o644))
	return bank
}
