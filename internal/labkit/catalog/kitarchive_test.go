package catalog

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKitArchiveRefusesAnythingButKitEntries(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"01-add/ref/x_test.go", "01-add/../x", "01-add/mutants/x.go", "01-add/tests/x_test.go", "x"} {
		assert.Error(t, checkKitName(bad), bad)
	}
}
