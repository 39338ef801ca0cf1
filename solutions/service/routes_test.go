package service

import (
	"os"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/solutions/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoutesFileReadsEveryRouteSetting(t *testing.T) {
	file := t.TempDir() + "/routes.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"routes":[
		{"model":"chat","targets":[{"provider":"a","model":"big"},{"provider":"b","continue":true}],
		 "fallback_on":["413"],"retry_same":true,"wait_retry_after":"1500ms"},
		{"model":"plain","targets":[{"provider":"a"},{"provider":"b"}]}]}`), 0o644))
	routes, err := LoadRoutes(file, []string{"flag=a:small,b"})
	require.NoError(t, err)
	assert.Equal(t, []router.Route{
		{Name: "chat", Targets: []router.Target{{Provider: "a", Model: "big"}, {Provider: "b"}}, FallbackOn: []string{"413"},
			Continue: []router.Target{{Provider: "b"}}, RetrySame: true, WaitRetryAfter: 1500 * time.Millisecond},
		{Name: "plain", Targets: []router.Target{{Provider: "a"}, {Provider: "b"}}, FallbackOn: DefaultFallbackOn},
		{Name: "flag", Targets: []router.Target{{Provider: "a", Model: "small"}, {Provider: "b"}}, FallbackOn: DefaultFallbackOn},
	}, routes)
}

func TestRoutesFileRefusesWhatItCannotRead(t *testing.T) {
	for _, body := range []string{
		`{"routes":[{"model":"chat","targets":[{"provider":"a"}],"wait_retry_after":"soon"}]}`,
		`{"routes":[{"model":"chat","targets":[{"provider":"a","continues":true}]}]}`,
	} {
		file := t.TempDir() + "/routes.json"
		require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
		_, err := LoadRoutes(file, nil)
		assert.Error(t, err, body)
	}
}
