package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExitCodeFollowsTheAnswer(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	var errb bytes.Buffer
	assert.Equal(t, 0, run([]string{srv.URL}, &errb), "200 is healthy: %s", errb.String())
	status = http.StatusServiceUnavailable
	assert.Equal(t, 1, run([]string{srv.URL}, &errb), "503 (draining) is not")
	assert.Contains(t, errb.String(), "HTTP 503")
	srv.Close()
	assert.Equal(t, 1, run([]string{srv.URL}, &errb), "nothing listening is not")
	assert.Equal(t, 2, run(nil, &errb), "no URL is a usage error")
}
