package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelpListsEveryFlagAndItsVariable(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{arg}, &out, &errb, nil)
			assert.Equal(t, 0, code, "%s is not an error", arg)
			for _, want := range []string{"-latency", "-error-rate", "-errors", "-outage", "-slow", "-seed", "MOCKUPSTREAM_ERROR_RATE", "MOCKUPSTREAM_API_KEY", "/healthz"} {
				assert.Contains(t, errb.String(), want, "%s names %s", arg, want)
			}
		})
	}
}

func TestEnvironmentSetsFlagsAndAFlagWins(t *testing.T) {
	env := map[string]string{
		"MOCKUPSTREAM_LATENCY":    "300ms",
		"MOCKUPSTREAM_ERROR_RATE": "0.25",
		"MOCKUPSTREAM_ERRORS":     "500|429",
		"MOCKUPSTREAM_SLOW":       "10s-20s:1s@0.5; 30s-40s:2s@0.1",
		"MOCKUPSTREAM_ADDR":       "0.0.0.0:9000",
		"MOCKUPSTREAM_CAPACITY":   "8",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := parse([]string{"-latency", "50ms"}, io.Discard, lookup)
	require.NoError(t, err)
	assert.Equal(t, 50*time.Millisecond, c.latency, "the flag wins over MOCKUPSTREAM_LATENCY")
	assert.InDelta(t, 0.25, c.errorRate, 0, "from MOCKUPSTREAM_ERROR_RATE")
	assert.Equal(t, "0.0.0.0:9000", c.addr)
	assert.Equal(t, []string{"10s-20s:1s@0.5", "30s-40s:2s@0.1"}, c.slow, "a repeatable flag takes ;-separated values from the environment")
	assert.Equal(t, "name=mock,model=mock-1,latency=50ms,jitter=40ms,chunk-delay=15ms,error-rate=0.25,errors=500|429,retry-after=1s,capacity=8,seed=1,slow=10s-20s:1s@0.5,slow=30s-40s:2s@0.1", c.spec())
}

func TestBadSettingsExitWith2(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":     {"-nope"},
		"bad error rate":   {"-error-rate", "2"},
		"bad error kind":   {"-errors", "418"},
		"bad slow window":  {"-slow", "soon"},
		"stray argument":   {"serve"},
		"bad outage range": {"-outage", "30s"},
	} {
		t.Run(name, func(t *testing.T) {
			var errb bytes.Buffer
			assert.Equal(t, 2, run(t.Context(), args, io.Discard, &errb, nil), "%s: %s", name, errb.String())
			assert.NotEmpty(t, errb.String(), "%s says why", name)
		})
	}
}

// TestServesUntilCancelled runs the command on a loopback listener: a
// health check, a chat call, then a clean stop when its context ends.
func TestServesUntilCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var out bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-latency", "1ms", "-jitter", "0", "-chunk-delay", "0"}, &out, io.Discard, ln)
	}()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(base + "/healthz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = client.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"mock-1","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	client.CloseIdleConnections()
	cancel()
	select {
	case c := <-code:
		assert.Equal(t, 0, c)
	case <-time.After(10 * time.Second):
		t.Fatal("mockupstream did not stop within 10 s of its context ending")
	}
	assert.Contains(t, out.String(), "mockupstream listening on http://"+ln.Addr().String())
}
