package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/production-go/gateway-lab/internal/testkit/promtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchedBody is a request body that remembers whether anyone read it.
type watchedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

// TestATenantOverItsRateIsRefusedBeforeItsBodyIsRead: the rate is the
// cheapest refusal, so it comes first — before a megabyte is read and
// parsed — and the request is not held to the rate a second time.
func TestATenantOverItsRateIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/generate"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRigWith(t, baseConfig(), gated(0.5, 1, 0), simProvider(t, sim.Config{Name: "alpha"}))
				body := chatBody
				if path == "/v1/generate" {
					body = `{"prompt":"hi"}`
				}
				require.Equal(t, http.StatusOK, r.do(http.MethodPost, path, body, "X-Tenant-ID", "acme").Code,
					"the one token of the burst: one request, held to the rate once, not twice")
				b := &watchedBody{r: strings.NewReader(body)}
				req := httptest.NewRequest(http.MethodPost, path, b)
				req.Header.Set("X-Tenant-ID", "acme")
				rec := httptest.NewRecorder()
				r.srv.ServeHTTP(rec, req)
				assert.Equal(t, http.StatusTooManyRequests, rec.Code)
				assert.Equal(t, "rate_limited", decodeError(t, rec).code())
				assert.False(t, b.read.Load(), "the body of a request over its rate is never read")
				assert.Equal(t, "close", rec.Header().Get("Connection"), "and the connection is not kept for the rest of it")
				assert.Equal(t, 1.0, promtest.Counter(t, r.reg, "gateway_admission_rejections_total", "reason", "rate_limited"), "counted once")
			})
		})
	}
}

// TestABodyOverTheCallersOwnLimitIsRefusedUnparsed: an identity may carry
// a smaller body limit than the server's (a tier's prompt size); a body
// over it is never buffered past it, parsed or admitted.
func TestABodyOverTheCallersOwnLimitIsRefusedUnparsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var limited []string
		admitted := 0
		r := newRigWith(t, baseConfig(), func(o *Options) {
			o.Identify = func(*http.Request) (tenant.Identity, *chatapi.Error) {
				return tenant.Identity{Key: "acme", Tenant: "acme", Tier: "free", MaxBodyBytes: 100}, nil
			}
			o.CallerLimited = func(id tenant.Identity, limit policy.Limit) { limited = append(limited, id.Key+":"+string(limit)) }
			o.Admit = func(ctx context.Context, _ tenant.Identity, _ tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error) {
				admitted++
				return ctx, tenant.Pass{}, nil
			}
		}, simProvider(t, sim.Config{Name: "alpha"}))
		big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`
		rec := r.do(http.MethodPost, "/v1/chat/completions", big)
		assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		assert.Equal(t, "prompt_too_large", decodeError(t, rec).code(), "the caller's own limit, named as such")
		assert.Contains(t, rec.Body.String(), "100", "the refusal names the limit")
		assert.Contains(t, rec.Body.String(), "free tier")

		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(big))
		req.ContentLength = int64(len(big))
		rec = httptest.NewRecorder()
		r.srv.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, "declared too big: refused the same")
		assert.Zero(t, admitted, "neither is parsed, nor shown to Admit")
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/chat/completions", chatBody).Code, "one within the limit is served")
		assert.Equal(t, 1, admitted)
		assert.Equal(t, []string{"acme:prompt_bytes", "acme:prompt_bytes"}, limited, "both refusals counted, the read one and the declared one")
	})
}

// TestAClientStillSendingATooLargePromptReadsThe413: over a real
// connection, a body over the caller's limit but within the server's is
// answered, then drained — never reset under a client still writing it.
func TestAClientStillSendingATooLargePromptReadsThe413(t *testing.T) {
	r := newRigWith(t, baseConfig(), func(o *Options) {
		o.MaxBodyBytes = 1 << 20
		o.Identify = func(*http.Request) (tenant.Identity, *chatapi.Error) {
			return tenant.Identity{Key: "acme", Tenant: "acme", Tier: "free", MaxBodyBytes: 100}, nil
		}
	}, simProvider(t, sim.Config{Name: "alpha"}))
	srv := httptest.NewServer(r.srv)
	t.Cleanup(srv.Close)
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 200_000) + `"}]}`
	for i := range 20 {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(big)
			if chunked {
				body = io.MultiReader(strings.NewReader(big)) // no length: read until the limit trips
			}
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", body)
			require.NoError(t, err, "round %d, chunked %v: the client must read the refusal, not a reset", i, chunked)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		}
	}
}

// TestTheAdmissionIsSettledAfterTheAnswerIsWritten: settling tokens and
// giving a lease back are Redis round trips; the caller must not wait for
// them.
func TestTheAdmissionIsSettledAfterTheAnswerIsWritten(t *testing.T) {
	for _, tc := range []struct{ name, path, body string }{
		{"a whole chat answer", "/v1/chat/completions", chatBody},
		{"a stream", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"a generate answer", "/v1/generate", `{"prompt":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptest.NewRecorder()
				written, flushed := -1, false
				r := newRigWith(t, baseConfig(), func(o *Options) {
					o.Admit = func(ctx context.Context, _ tenant.Identity, _ tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error) {
						return ctx, tenant.Pass{Done: func(*llm.Usage, error) { written, flushed = rec.Body.Len(), rec.Flushed }}, nil
					}
				}, simProvider(t, sim.Config{Name: "alpha"}))
				req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
				r.srv.ServeHTTP(rec, req)
				require.Equal(t, http.StatusOK, rec.Code)
				assert.Equal(t, rec.Body.Len(), written, "done ran once the whole answer had been written")
				assert.True(t, flushed, "and flushed: net/http holds a small answer until the handler returns, after done")
			})
		})
	}
}

// capped identifies each request by its X-Tenant-ID header, with an
// in-flight cap of max, and counts the refusals it causes in limited.
func capped(max int, limited ...*[]string) func(*Options) {
	return func(o *Options) {
		o.Identify = func(r *http.Request) (tenant.Identity, *chatapi.Error) {
			t := r.Header.Get("X-Tenant-ID")
			return tenant.Identity{Key: t, Tenant: t, MaxInFlight: max}, nil
		}
		if len(limited) > 0 {
			o.CallerLimited = func(id tenant.Identity, limit policy.Limit) {
				*limited[0] = append(*limited[0], id.Key+":"+string(limit))
			}
		}
	}
}

// TestACallerAtItsInFlightCapIsRefusedBeforeAnythingElse: a caller that
// floods the gateway costs one map lookup per request over its cap — not
// a rate-limit round trip, not a body read — and takes no rate token.
func TestACallerAtItsInFlightCapIsRefusedBeforeAnythingElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var limited []string
		r := newRigWith(t, baseConfig(), gated(0.001, 3, 0, capped(2, &limited)), simProvider(t, sim.Config{Name: "alpha", Latency: time.Second}))
		held := make(chan int, 2)
		for range 2 {
			go func() { held <- r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme").Code }()
		}
		synctest.Wait() // two of acme's requests wait on the upstream

		b := &watchedBody{r: strings.NewReader(chatBody)}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", b)
		req.Header.Set("X-Tenant-ID", "acme")
		rec := httptest.NewRecorder()
		r.srv.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.False(t, b.read.Load(), "its body is never read")
		assert.Zero(t, promtest.Counter(t, r.reg, "gateway_admission_rejections_total", "reason", "rate_limited"), "nor is its rate asked")
		assert.Equal(t, []string{"acme:in_flight"}, limited, "the refusal is counted")

		other := make(chan int, 1)
		go func() { other <- r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "other").Code }()
		assert.Equal(t, http.StatusOK, <-other, "another caller is served meanwhile")
		assert.Equal(t, http.StatusOK, <-held)
		assert.Equal(t, http.StatusOK, <-held)
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme").Code,
			"the third token of acme's burst of 3 is still there: the refusal took none")
		rec = r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme")
		assert.Equal(t, "rate_limited", decodeError(t, rec).code(), "and then the bucket is empty")
	})
}

// TestACallersPlaceIsGivenBackHoweverItsRequestEnds: with a cap of one,
// each request below must find the place its predecessor held free.
func TestACallersPlaceIsGivenBackHoweverItsRequestEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), gated(0.001, 6, 0, capped(1), func(o *Options) { o.MaxBodyBytes = 1000 }),
			simProvider(t, sim.Config{Name: "alpha"}))
		for _, tc := range []struct {
			name, path, body string
			code             int
		}{
			{"answered", "/v1/chat/completions", chatBody, http.StatusOK},
			{"streamed", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, http.StatusOK},
			{"generated", "/v1/generate", `{"prompt":"hi"}`, http.StatusOK},
			{"not JSON", "/v1/chat/completions", `{`, http.StatusBadRequest},
			{"an unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, http.StatusNotFound},
			{"a body too large", "/v1/chat/completions", strings.Repeat(" ", 2000), http.StatusRequestEntityTooLarge},
			{"over the rate", "/v1/chat/completions", chatBody, http.StatusTooManyRequests},
			{"over the rate again", "/v1/chat/completions", chatBody, http.StatusTooManyRequests},
		} {
			rec := r.do(http.MethodPost, tc.path, tc.body, "X-Tenant-ID", "acme")
			require.Equal(t, tc.code, rec.Code, "%s: %s", tc.name, rec.Body.String())
			if tc.code == http.StatusTooManyRequests {
				assert.Equal(t, "rate_limited", decodeError(t, rec).code(), "%s: refused for the rate, not for a place the last request kept", tc.name)
			}
		}
	})
}
