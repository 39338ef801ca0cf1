package service

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/router"
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

func TestAProbeIntervalAboveTheDefaultMaximumRaisesIt(t *testing.T) {
	c, err := Parse("t", []string{"-probe-interval=5s"}, io.Discard, nil)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.Router.Health.ProbeMaxInterval, "probes every 5 s, no doubling")
	_, err = Parse("t", []string{"-probe-interval=5s", "-probe-max-interval=2s"}, io.Discard, nil)
	assert.ErrorContains(t, err, "-probe-max-interval 2s is below -probe-interval 5s")
	c, err = Parse("t", nil, io.Discard, nil)
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, c.Router.Health.ProbeInterval)
	assert.Equal(t, 2*time.Second, c.Router.Health.ProbeMaxInterval)
}
