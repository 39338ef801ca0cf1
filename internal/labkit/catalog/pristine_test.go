package catalog

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPristineArchiveIsReproducibleAndRoundTrips(t *testing.T) {
	t.Parallel()
	labs := map[string]map[string][]byte{
		"01-add": {"add_test.go": []byte("package add\n"), "main_test.go": []byte("package add // main\n")},
		"02-sub": {"sub_test.go": []byte("package sub\n")},
	}
	var a, b bytes.Buffer
	require.NoError(t, WritePristineArchive(&a, labs))
	require.NoError(t, WritePristineArchive(&b, labs))
	assert.Equal(t, a.Bytes(), b.Bytes(), "the same tests must give the same bytes, or every export shows a change")
	got, err := readPristineArchive(&a)
	require.NoError(t, err)
	assert.Equal(t, labs, got)
}

func TestPristineArchiveRejectsAnythingButLabTestFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		entry tar.Header
	}{
		{"parent directory", tar.Header{Name: "../add_test.go"}},
		{"nested", tar.Header{Name: "01-add/sub/add_test.go"}},
		{"absolute", tar.Header{Name: "/01-add/add_test.go"}},
		{"no lab directory", tar.Header{Name: "add_test.go"}},
		{"not a test file", tar.Header{Name: "01-add/add.go"}},
		{"a symlink", tar.Header{Name: "01-add/add_test.go", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			hdr := tc.entry
			if hdr.Typeflag == 0 {
				hdr.Typeflag = tar.TypeReg
			}
			hdr.Mode = 0o644
			require.NoError(t, tw.WriteHeader(&hdr))
			require.NoError(t, tw.Close())
			require.NoError(t, zw.Close())
			_, err := readPristineArchive(&buf)
			require.Error(t, err, "entry %q must be refused", hdr.Name)
		})
	}
}
