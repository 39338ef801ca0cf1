// Command benchhttp is the harness behind `make bench-http`: an instant
// OpenAI-compatible upstream, and a bare httputil.ReverseProxy to compare the
// gateway against. Both run on loopback only.
//
//	benchhttp upstream -addr 127.0.0.1:9101
//	benchhttp proxy -addr 127.0.0.1:9102 -target http://127.0.0.1:9101
//	benchhttp ttfb -url http://127.0.0.1:9102/v1/chat/completions -n 200
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchhttp upstream|proxy|ttfb [flags]  (-h on each)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "upstream":
		err = upstream(ctx, os.Args[2:])
	case "proxy":
		err = proxy(ctx, os.Args[2:])
	case "ttfb":
		err = ttfb(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want upstream, proxy or ttfb", os.Args[1])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "benchhttp:", err)
		os.Exit(1)
	}
}

const answer = `{"id":"x","object":"chat.completion","created":0,"model":"instant-1","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`

// chunks are a streamed answer's, "ok!" in three pieces.
var chunks = [][]byte{
	[]byte(`{"model":"instant-1","choices":[{"index":0,"delta":{"content":"o"}}]}`),
	[]byte(`{"model":"instant-1","choices":[{"index":0,"delta":{"content":"k"}}]}`),
	[]byte(`{"model":"instant-1","choices":[{"index":0,"delta":{"content":"!"}}]}`),
}

// upstream answers every chat completion at once; streams send 3 chunks.
func upstream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9101", "listen address (loopback)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			events := chatapi.NewEventStream(w, 0)
			for _, c := range chunks {
				if events.Send(c) != nil {
					return
				}
			}
			_ = events.Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	return serve(ctx, *addr, h)
}

// proxy is the baseline: a reverse proxy with an idle pool raised to match
// the gateway's (the default of 2 idle connections per host would make it
// open new connections at concurrency 32).
func proxy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9102", "listen address (loopback)")
	target := fs.String("target", "http://127.0.0.1:9101", "upstream base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	rp.FlushInterval = -1                    // flush streams at once, as the gateway does
	rp.ErrorLog = log.New(io.Discard, "", 0) // wrk hanging up at the end of a run is not news
	return serve(ctx, *addr, rp)
}

func serve(ctx context.Context, addr string, h http.Handler) error {
	if !strings.HasPrefix(addr, "127.") && !strings.HasPrefix(addr, "localhost") {
		return fmt.Errorf("%s: benchhttp listens on loopback only", addr)
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ttfb measures time to the first streamed byte over n sequential requests
// and prints p50 and p99 in milliseconds.
func ttfb(args []string) error {
	fs := flag.NewFlagSet("ttfb", flag.ContinueOnError)
	target := fs.String("url", "", "chat completions URL")
	n := fs.Int("n", 200, "requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	body := `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	var samples []time.Duration
	for range *n {
		req, err := http.NewRequest(http.MethodPost, *target, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		buf := make([]byte, 1)
		_, err = resp.Body.Read(buf)
		samples = append(samples, time.Since(start))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil && err != io.EOF {
			return err
		}
	}
	slices.Sort(samples)
	p := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000 }
	fmt.Printf("%.3f %.3f\n", p(0.5), p(0.99))
	return nil
}
