package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/router"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
)

// BenchmarkProxyPath puts the gateway's HTTP path and a bare
// httputil.ReverseProxy in front of the same instant loopback upstream, in
// one process, so benchstat can compare them call for call:
//
//	go test -run '^$' -bench ProxyPath -benchmem -count 10 ./gateway/httpapi/ > bench.txt
//	go tool benchstat -col /path bench.txt
//
// Both make a real HTTP call to the upstream; the gateway also parses the
// request, admits it, runs the retry loop and the breaker, and reads the
// answer's usage.
func BenchmarkProxyPath(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"instant-1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer up.Close()
	body := []byte(`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)

	p, err := openaicompat.New(openaicompat.Config{Name: "instant", BaseURL: up.URL + "/v1", Model: "instant-1"})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	gw, err := router.New(router.Config{
		Slots:  router.Slots{MaxConcurrent: 512, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, AttemptTimeout: 10 * time.Second, TotalTimeout: 30 * time.Second},
		Health: router.Health{FailureThreshold: 5, RecoveryTimeout: time.Second},
	}, p)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = gw.Close(context.Background()) }()
	srv := New(Options{Router: gw, Drainer: drain.New(), Stream: router.StreamLimits{FirstToken: time.Second, Idle: time.Second}})

	target, _ := url.Parse(up.URL)
	rp := httputil.NewSingleHostReverseProxy(target)

	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"path=gateway", srv}, {"path=reverseproxy", rp}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				c.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
