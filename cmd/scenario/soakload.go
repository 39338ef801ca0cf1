package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/tidwall/gjson"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The soak's load: a few tenants on different tiers, each an open-loop
// stream of plain and streamed chat completions, and one tenant's burst.

// soakTenant is one tenant of the load, on a tier of soakTiers.
type soakTenant struct {
	name, tier string
	rate       int    // requests per second, steady
	token      string // its bearer token, once minted
}

// soakTenants are the steady load: 18 requests a second in all, a third
// of them streamed. initech's 2/s sits under bronze's 3/s; its cap of two
// requests in flight is what a brown-out can reach.
func soakTenants() []soakTenant {
	return []soakTenant{{name: "acme", tier: "gold", rate: 10}, {name: "globex", tier: "silver", rate: 6}, {name: "initech", tier: "bronze", rate: 2}}
}

// The burst: globex sends this many more requests a second during the
// plan's burst window, three times its tier's rate on top of its own load.
const (
	soakBurstTenant = "globex"
	soakBurstRate   = 30
)

// soakTiers is the soak's tier policy: three tiers, two with token quotas.
const soakTiers = `tiers:
  gold:   {rate_per_second: 40, burst: 40, max_in_flight: 16, max_prompt_bytes: 65536, models: ["*"], max_request_timeout: 30s, tokens_per_minute: 0}
  silver: {rate_per_second: 10, burst: 10, max_in_flight: 8, max_prompt_bytes: 65536, models: ["*"], max_request_timeout: 30s, tokens_per_minute: 200000}
  bronze: {rate_per_second: 3, burst: 5, max_in_flight: 2, max_prompt_bytes: 32768, models: ["auto"], max_request_timeout: 30s, tokens_per_minute: 50000}
`

// soakStreamHeader marks a streamed request, so the balancer can count the
// streams in flight through each replica (the gateway ignores it).
const soakStreamHeader = "X-Soak-Stream"

// soakStreamBody asks for a streamed answer with its usage in a last chunk.
const soakStreamBody = `{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"how does a circuit breaker work"}]}`

// soakClientTimeout is the clients' deadline: past it a request is lost (a
// hang). It is above the tiers' 30 s so the gateway's own limit answers first.
const soakClientTimeout = 35 * time.Second

// soakTargets is one tenant's mix: plain, streamed, plain.
func soakTargets(url, token string) []vegeta.Target {
	plain := tieredTarget(url, token)
	stream := tieredTarget(url, token)
	stream.Body = []byte(soakStreamBody)
	stream.Header = stream.Header.Clone()
	stream.Header.Set(soakStreamHeader, "1")
	return []vegeta.Target{plain, stream, plain}
}

// outcome is what became of one request, as the report counts it.
type outcome int

const (
	answered outcome = iota // 200 and a complete answer
	refused                 // a clean refusal: the gateway's JSON error, or a stream's error event
	lost                    // anything else
)

func (o outcome) String() string { return [...]string{"answered", "refused", "lost"}[o] }

// soakSample is one request's outcome on the soak's clock.
type soakSample struct {
	at      float64 // seconds since the load started, when it was sent
	lat     time.Duration
	tenant  string
	stream  bool
	outcome outcome
	reason  string // why refused or lost
	tokens  int    // the usage the answer reported (answered only)
}

// soakAttack waits until from on the soak's clock, then sends rate
// requests a second for dur, round-robin over targets, and classifies
// every result. It stops early when ctx ends.
func soakAttack(ctx context.Context, start time.Time, from, dur time.Duration, tenant string, rate int, targets []vegeta.Target) []soakSample {
	if at(ctx, start, from) != nil {
		return nil
	}
	atk := vegeta.NewAttacker(vegeta.Timeout(soakClientTimeout), vegeta.KeepAlive(true), vegeta.MaxBody(256<<10),
		vegeta.Workers(8), vegeta.MaxWorkers(512))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var out []soakSample
	for res := range atk.Attack(vegeta.NewStaticTargeter(targets...), vegeta.Rate{Freq: rate, Per: time.Second}, dur, tenant) {
		o, reason, tokens := classify(int(res.Code), res.Body, res.Error)
		out = append(out, soakSample{at: res.Timestamp.Sub(start).Seconds(), lat: res.Latency, tenant: tenant,
			stream: bytes.HasPrefix(res.Body, []byte("data: ")), outcome: o, reason: reason, tokens: tokens})
	}
	return out
}

// classify sorts one response: answered (a 200 with a complete body),
// refused cleanly (a non-2xx carrying the gateway's JSON error, or a
// stream ended by an error event; the reason is the error's code) or lost
// (a transport error, a reset, a hang past the client's deadline, a cut
// stream, a 200 with a broken body). tokens is the answer's usage.
func classify(code int, body []byte, errText string) (o outcome, reason string, tokens int) {
	switch {
	case code == 0:
		return lost, transportReason(errText), 0
	case code == http.StatusOK:
		return classifyAnswer(body)
	case code >= 200 && code < 300:
		return lost, fmt.Sprintf("status %d", code), 0
	}
	e := gjson.GetBytes(body, "error")
	if !gjson.ValidBytes(body) || !e.IsObject() {
		return lost, fmt.Sprintf("status %d without the gateway's JSON error", code), 0
	}
	return refused, cmp.Or(e.Get("code").Str, e.Get("type").Str, strconv.Itoa(code)), 0
}

// classifyAnswer sorts a 200: a stream by how it ended, a whole answer by
// whether it is one.
func classifyAnswer(body []byte) (outcome, string, int) {
	switch streamEnd(body) {
	case "done":
		return streamAnswer(body)
	case "error":
		return refused, "stream error event: " + cmp.Or(streamErrorCode(body), "no code"), 0
	case "lost":
		return lost, "stream cut without [DONE] or an error event", 0
	}
	if !gjson.ValidBytes(body) || gjson.GetBytes(body, "choices.#").Int() == 0 {
		return lost, "200 with a broken body", 0
	}
	return answered, "", usageIn(body)
}

// streamAnswer checks a stream that ended with [DONE]: every event before
// it is JSON and one of them finishes the answer.
func streamAnswer(body []byte) (outcome, string, int) {
	finished := false
	for ev := range sseData(body) {
		if string(ev) == "[DONE]" {
			break
		}
		if !gjson.ValidBytes(ev) {
			return lost, "stream with [DONE] and a broken event", 0
		}
		finished = finished || gjson.GetBytes(ev, "choices.0.finish_reason").Str != ""
	}
	if !finished {
		return lost, "stream with [DONE] but no finish_reason", 0
	}
	return answered, "", usageIn(body)
}

// sseData yields the data of each event of an event stream.
func sseData(body []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for d := range chatapi.Events(bytes.NewReader(body)) {
			if !yield(d) {
				return
			}
		}
	}
}

// usageIn is the total_tokens an answer reports: a whole answer's usage,
// or a stream's last usage chunk; 0 without one.
func usageIn(body []byte) int {
	if !bytes.HasPrefix(body, []byte("data: ")) {
		return int(gjson.GetBytes(body, "usage.total_tokens").Int())
	}
	n := 0
	for ev := range sseData(body) {
		if u := gjson.GetBytes(ev, "usage.total_tokens"); u.Exists() {
			n = int(u.Int())
		}
	}
	return n
}

// streamErrorCode is the code (or type) of a stream's error event.
func streamErrorCode(body []byte) string {
	for ev := range sseData(body) {
		if e := gjson.GetBytes(ev, "error"); e.IsObject() {
			return cmp.Or(e.Get("code").Str, e.Get("type").Str)
		}
	}
	return ""
}

// transportReason names a request that got no status: its deadline, a
// reset, a closed connection, or the error itself.
func transportReason(err string) string {
	switch {
	case strings.Contains(err, "Client.Timeout") || strings.Contains(err, "deadline exceeded"):
		return "no answer within the client's deadline"
	case strings.Contains(err, "connection reset"):
		return "connection reset"
	case strings.Contains(err, "EOF"):
		return "connection closed (EOF)"
	case strings.Contains(err, "connection refused"):
		return "connection refused"
	}
	if len(err) > 80 {
		err = err[:80]
	}
	return "transport error: " + err
}

// admissionRefusals are the codes a request is refused with before it is
// admitted: limits, quotas, overload, a draining replica. Any other
// refusal (an upstream's error, a deadline, a stream's error event) came
// after admission, so its request counts as accepted.
var admissionRefusals = codes(
	chatapi.RateLimited, chatapi.TenantBusy, chatapi.TokensPerMinute, chatapi.TokensOverQuota,
	chatapi.LimitsUnavailable, chatapi.LimiterUnavailable, chatapi.Overloaded, chatapi.Draining,
	chatapi.InvalidToken, chatapi.MissingToken, chatapi.ExpiredToken, chatapi.ModelNotAllowed, chatapi.UnknownTier,
	chatapi.PromptTooLarge, chatapi.RequestTooLarge, chatapi.InvalidRequest, chatapi.InvalidBody,
)

// codes is the set of the failures' codes.
func codes(fs ...chatapi.Failure) map[string]bool {
	set := map[string]bool{}
	for _, f := range fs {
		set[f.Code] = true
	}
	return set
}

// accepted reports whether the gateway admitted the request.
func (s soakSample) accepted() bool { return s.outcome != refused || !admissionRefusals[s.reason] }
