package spec

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEachVisitsFieldsInOrderAndNamesTheBadOne(t *testing.T) {
	var got []string
	require.NoError(t, Each("a=1, b=2,c=x=y", func(k, v string) error { got = append(got, k+":"+v); return nil }))
	assert.Equal(t, []string{"a:1", "b:2", "c:x=y"}, got)

	assert.ErrorIs(t, Each("a=1,oops", func(string, string) error { return nil }), ErrSyntax)
	boom := errors.New("not a duration")
	err := Each("latency=soon", func(string, string) error { return boom })
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "latency=soon")
}
