package catalog

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTestFuncsFindsOnlyTopLevelTests(t *testing.T) {
	src := []byte(`package p
import "testing"
func TestMain(m *testing.M) {}
func TestOne(t *testing.T) {}
func Testlower(t *testing.T) {}
func helper(t *testing.T) {}
func BenchmarkX(b *testing.B) {}
func TestTwo(t *testing.T) {}
`)
	got, err := TestFuncs(map[string][]byte{"p_test.go": src})
	require.NoError(t, err)
	assert.Equal(t, []string{"TestOne", "TestTwo"}, got)
}

func TestExerciseTestFuncsLeavesOutFilesBehindABuildConstraint(t *testing.T) {
	plain := []byte("package p\nimport \"testing\"\nfunc TestPlain(t *testing.T) {}\n")
	tagged := []byte("//go:build prove\n\n// A comment.\npackage p\nimport \"testing\"\nfunc TestProve(t *testing.T) {}\n")
	late := []byte("package p\n\n//go:build notaconstraint\nimport \"testing\"\nfunc TestLate(t *testing.T) {}\n")
	sources := map[string][]byte{"a_test.go": plain, "b_test.go": tagged, "c_test.go": late}
	got, err := ExerciseTestFuncs(sources)
	require.NoError(t, err)
	assert.Equal(t, []string{"TestPlain", "TestLate"}, got, "a //go:build after the package clause constrains nothing")
	all, err := TestFuncs(sources)
	require.NoError(t, err)
	assert.Equal(t, []string{"TestPlain", "TestProve", "TestLate"}, all, "TestFuncs is every test declared")
}

func TestCatalogFindNamesValidLabs(t *testing.T) {
	c, err := Load("../testdata/fixture")
	require.NoError(t, err)
	for _, tc := range []struct{ description, name string }{
		{"the number", "1"},
		{"the number, two digits", "01"},
		{"the directory's name", "01-add"},
		{"the make target", "lab-01"},
		{"the directory's path", "labs/01-add/"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			l, err := c.Find(tc.name)
			require.NoError(t, err, tc.name)
			assert.Equal(t, "01", l.Number)
		})
	}
	_, err = c.Find("7")
	require.True(t, errors.Is(err, ErrUnknownLab))
	assert.Contains(t, err.Error(), "01 (01-add), 02 (02-later)", "the error should list the valid labs")
	later, _ := c.Find("02")
	assert.False(t, later.Built())
	assert.Len(t, c.BuiltLabs(), 1)
}

func TestFilesToEditAreTheOnesWithTODOs(t *testing.T) {
	root := fixture(t)
	c, err := Load(root)
	require.NoError(t, err)
	l, err := c.Find("01")
	require.NoError(t, err)
	write(t, root, "labs/01-add/script.lua", "-- TODO(lab 01): a file that is not Go is a file to edit too\n")
	write(t, root, "labs/01-add/doc.go", "// Package add has no TODO here.\npackage add\n")
	files, err := FilesToEdit(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add.go", "script.lua"}, files)

	write(t, root, "labs/01-add/add.go", "package add\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Sum(xs ...int) int { return 0 }\n")
	write(t, root, "labs/01-add/script.lua", "-- done\n")
	files, err = FilesToEdit(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add.go", "doc.go", "script.lua"}, files, "no TODO left: every source file")
}
