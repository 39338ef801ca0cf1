package labkit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// These tests run labctl's verify and grade against a tiny lab repository
// (testdata/fixture, its own module with no dependencies), copied into a
// temporary directory so each test can break it in its own way.

func fixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("testdata/fixture")))
	return dst
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
}

func fixtureLab(t *testing.T, root string) Lab {
	t.Helper()
	c, err := LoadCatalog(root)
	require.NoError(t, err)
	return c.BuiltLabs()[0]
}

// hintSection is one hint, as HINTS.md writes it, for the named tests.
func hintSection(title, tests string) string {
	return "## " + title + "\nTests: " + tests + "\n\n### Nudge\nWhere do you look?\n\n### Approach\nIn words, the idea.\n\n### Near-solution\n```go\nreturn 1\n```\n"
}
