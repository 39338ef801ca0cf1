package service

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// status sends one GET with extra header bytes and returns the status the
// public listener answers.
func status(t *testing.T, addr string, extra int) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	req := fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nX-Pad: %s\r\nConnection: close\r\n\r\n",
		strings.Repeat("t", 4<<10), strings.Repeat("a", extra))
	_, _ = conn.Write([]byte(req)) // a server that refuses may close before it has read it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// The public listener reads a request's headers before it knows who is
// asking: past PublicMaxHeaderBytes (and net/http's 4 KiB of slack) it
// answers 431 instead of reading on.
func TestThePublicListenerRefusesHeadersPastItsCap(t *testing.T) {
	s := testService(t)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = s.publicServer()
	ts.Start()
	defer ts.Close()
	addr := ts.Listener.Addr().String()

	assert.NotEqual(t, http.StatusRequestHeaderFieldsTooLarge, status(t, addr, 8<<10),
		"a 4 KiB token and 8 KiB of other headers are a request")
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, status(t, addr, PublicMaxHeaderBytes+4<<10),
		"past the cap and net/http's slack: 431")
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, status(t, addr, 256<<10),
		"256 KiB of headers with no answer yet is never read whole")
}
