package service

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/trace"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProfilesAreServedOnTheAdminListenerOnly(t *testing.T) {
	s := testService(t)
	admin := httptest.NewServer(s.adminServer().Handler)
	defer admin.Close()
	resp, err := http.Get(admin.URL + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "goroutine profile:", "a goroutine profile, to find what is stuck")
	resp, err = http.Get(admin.URL + "/debug/pprof/cmdline")
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode, "the command line is not served: not a profile, and none of its business")

	public := httptest.NewServer(s.API)
	defer public.Close()
	resp, err = http.Get(public.URL + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "never on the public port")

	s.Config.Pprof = false
	off := httptest.NewServer(s.adminServer().Handler)
	defer off.Close()
	resp, err = http.Get(off.URL + "/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "-admin-pprof=false turns them off")
}

func TestTheFlightRecorderServesTheRecentTrace(t *testing.T) {
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: time.Second})
	require.NoError(t, fr.Start())
	defer fr.Stop()
	rec := httptest.NewRecorder()
	flightRecording(fr).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/flightrecorder", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.True(t, bytes.HasPrefix(rec.Body.Bytes(), []byte("go 1.")), "an execution trace go tool trace reads (it starts with its version header)")
}
