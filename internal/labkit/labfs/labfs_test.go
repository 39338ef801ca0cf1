package labfs

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStoredJSONReadsBackAndAMissingKeyReadsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	StoreJSON(dir, "k", map[string]int{"a": 1})
	var got map[string]int
	require.True(t, LoadJSON(dir, "k", &got), "the directory is made on the first store")
	assert.Equal(t, map[string]int{"a": 1}, got)
	left, err := filepath.Glob(filepath.Join(dir, "*.tmp"))
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary file is renamed into place")

	assert.False(t, LoadJSON(dir, "other", &got), "nothing stored under other")
	StoreJSON(dir, "", 1)
	assert.False(t, LoadJSON(dir, "", &got), `"" stores and loads nothing`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{"), 0o644))
	assert.False(t, LoadJSON(dir, "bad", &got), "a file that does not read is a miss")
}

func TestHashTreeHashesNamesAndContentsAndAMissingTreeEmpty(t *testing.T) {
	root := t.TempDir()
	sum := func(rel string) string {
		t.Helper()
		h := sha256.New()
		require.NoError(t, HashTree(h, root, rel))
		return hex.EncodeToString(h.Sum(nil))
	}
	empty := sum("missing")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "d", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "d", "sub", "a.txt"), []byte("a"), 0o644))
	one := sum("d")
	assert.NotEqual(t, empty, one)
	require.NoError(t, os.Rename(filepath.Join(root, "d", "sub", "a.txt"), filepath.Join(root, "d", "sub", "b.txt")))
	assert.NotEqual(t, one, sum("d"), "a file's name is hashed with its content")
	assert.True(t, IsDir(filepath.Join(root, "d")))
	assert.False(t, IsDir(filepath.Join(root, "d", "sub", "b.txt")))
}
