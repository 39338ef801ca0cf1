package catalog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture copies the tiny lab repository the tests of labkit's packages
// share (../testdata/fixture) into a temporary directory. labtest has it
// too, but labtest reads the catalogue, which a test of the catalogue
// cannot import.
func fixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("../testdata/fixture")))
	return dst
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
}
