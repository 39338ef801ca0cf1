package mutation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPatchAppliesWithDriftAndRejectsMismatch(t *testing.T) {
	patch := "# comment line, ignored\n\n--- a/f.go\n+++ b/f.go\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n"
	files, err := ParsePatch(patch)
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "f.go", files[0].Path)

	out, err := files[0].Apply("a\nb\nc\nd\ne\n")
	require.NoError(t, err)
	assert.Equal(t, "a\nb\nC\nd\ne\n", out)

	out, err = files[0].Apply("new\nlines\na\nb\nc\nd\n")
	require.NoError(t, err, "a hunk whose context moved down should still apply")
	assert.Equal(t, "new\nlines\na\nb\nC\nd\n", out)

	_, err = files[0].Apply("a\nb\nX\nd\n")
	assert.ErrorIs(t, err, ErrPatch, "context that does not match must be an error, never a silent no-op")

	_, err = ParsePatch("just words")
	assert.ErrorIs(t, err, ErrPatch)
}
