package labkit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	killsSkipsFirst = `package add

import "testing"

func TestSumCountsTheFirstNumber(t *testing.T) {
	if got := Sum(5, 1); got != 6 {
		t.Errorf("Sum(5, 1) = %d, want 6", got)
	}
}
`
	onlyAdd = `package add

import "testing"

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Error("Add(1, 2) != 3")
	}
}
`
)

// heldBackBank is an instructor's bank of one mutant for the fixture lab:
// Add subtracts. header is the patch's comment.
func heldBackBank(t *testing.T, header string) string {
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
