package gotest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLabTestsFollowTheHintsOrder(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "labs", "01-x")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package x\n\nimport \"testing\"\n\nfunc TestLate(t *testing.T) {}\nfunc TestIntegrationRedis(t *testing.T) {}\nfunc TestUnhinted(t *testing.T) {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b_test.go"), []byte("package x\n\nimport \"testing\"\n\nfunc TestEarly(t *testing.T) {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "HINTS.md"), []byte("# Hints\n\n"+labtest.HintSection("1. First step", "TestEarly, TestIntegrationRedis")+"\n"+labtest.HintSection("2. Second step", "TestLate")), 0o644))
	l := catalog.Lab{Number: "01", Dir: "01-x", Hints: "HINTS.md"}
	tests, err := LabTests(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"TestEarly", "TestLate", "TestUnhinted", "TestIntegrationRedis"}, tests,
		"step order, not file order; a test no hint names after the rest; the real-Redis test last whatever its hint")
}
