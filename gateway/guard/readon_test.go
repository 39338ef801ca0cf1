package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// biller streams deltas a few milliseconds apart and then reports its
// usage — an upstream that bills more than the bytes show (a prompt of
// file parts). After `after` deltas it can go silent instead (stall) or
// send flood bytes of chunks before its usage.
type biller struct {
	deltas int
	usage  llm.Usage
	stall  bool // after the deltas, say nothing until cut
	flood  int  // bytes of extra chunks before the usage
	drops  bool // after its finish and usage, the connection resets: no [DONE]

	mu     sync.Mutex
	ended  bool
	endErr error
}

func (*biller) Name() string         { return "up" }
func (*biller) HonoursContext() bool { return true }
func (b *biller) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (b *biller) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (c llm.Completion, err error) {
	defer func() {
		b.mu.Lock()
		b.ended, b.endErr = true, err
		b.mu.Unlock()
	}()
	wait := func() error {
		select {
		case <-time.After(5 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := chatapi.NewFrame("up-1")
	for i := range b.deltas {
		if err := wait(); err != nil {
			return llm.Completion{}, err
		}
		w := fmt.Sprintf("w%d ", i)
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if b.stall {
		<-ctx.Done()
		return llm.Completion{}, ctx.Err()
	}
	if err := wait(); err != nil { // the rest comes a moment after the deltas
		return llm.Completion{}, err
	}
	pad := strings.Repeat("x", 100)
	for sent := 0; sent < b.flood; sent += 100 {
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &pad}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	if b.drops {
		return llm.Completion{Usage: &b.usage}, errors.New("read: connection reset by peer")
	}
	return llm.Completion{Usage: &b.usage}, nil
}

func (b *biller) result() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended, b.endErr
}

// hangUp is a caller that reads `reads` chunks and then leaves: its
// request's context ends, and the router's emit says the caller has gone.
type hangUp struct {
	reads int
	leave context.CancelFunc

	mu   sync.Mutex
	read int
}

func (h *hangUp) emit(llm.Chunk) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.read == h.reads {
		h.leave()
		return fmt.Errorf("router: client stopped reading: %w", llm.ErrCallerGone)
	}
	h.read++
	return nil
}

func (h *hangUp) chunks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.read
}

// streamAndHangUp admits a request for the small tier (150 tokens
// reserved), streams it from b through the meter, and hangs up after
// reads chunks; it returns once the request is done, as the HTTP layer
// would.
func streamAndHangUp(t *testing.T, r *rig, b *biller, reads int) (*hangUp, error) {
	t.Helper()
	return streamAndHangUpAs(t, r, "acme", b, reads)
}

// streamAndHangUpAs is streamAndHangUp for tenant key.
func streamAndHangUpAs(t *testing.T, r *rig, key string, b *biller, reads int) (*hangUp, error) {
	t.Helper()
	caller, leave := context.WithCancel(t.Context())
	defer leave()
	ctx, done, e := r.admit(caller, tenant.Identity{Key: key, Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	h := &hangUp{reads: reads, leave: leave}
	_, err := metered(b).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, h.emit)
	done(nil, err)
	return h, err
}

func (s *seen) has(e string) bool { return slices.Contains(s.all(), e) }

// A caller who hangs up pays the upstream's bill, not the reservation:
// the call is read on, its answer going nowhere, until the upstream
// reports its usage; the request itself ends at once.
func TestACallerWhoHangsUpPaysTheUpstreamsBill(t *testing.T) {
	r := newRig(t, false)
	b := &biller{deltas: 9, usage: llm.Usage{PromptTokens: 880, CompletionTokens: 9, TotalTokens: 889}}
	h, err := streamAndHangUp(t, r, b, 5)
	require.ErrorIs(t, err, context.Canceled, "the request ends when its caller leaves")
	ended, _ := b.result()
	assert.False(t, ended, "and does not wait for the call it leaves behind")
	require.Eventually(t, func() bool { return r.obs.has("read_on:billed") }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 2000-889, r.left(t, "acme", 2000), "charged the 889 the upstream billed, not the 150 reserved")
	assert.Equal(t, 5, h.chunks(), "nothing reached the caller after it left")
	_, endErr := b.result()
	assert.NoError(t, endErr, "the upstream was read to its end")
}

// The caller can leave while the call waits for its next chunk: its
// request's context ends with no emit to fail. The call is read on all
// the same.
func TestACallerWhoLeavesBetweenChunksPaysTheBillToo(t *testing.T) {
	r := newRig(t, false)
	b := &biller{deltas: 6, usage: llm.Usage{TotalTokens: 700}}
	caller, leave := context.WithCancel(t.Context())
	ctx, done, e := r.admit(caller, tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	reads := 0
	_, err := metered(b).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error {
		if reads++; reads == 2 {
			leave() // the connection closes; the next chunk is still on its way
		}
		return nil
	})
	done(nil, err)
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return r.obs.has("read_on:billed") }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 2000-700, r.left(t, "acme", 2000))
}

// Only the caller's leaving detaches a call. A call the gateway itself
// cut — a hedge's loser, an attempt's deadline — stops at once (lab 08's
// rule) and keeps its reservation.
func TestACallTheGatewayCutsIsNotReadOn(t *testing.T) {
	for name, cut := range map[string]func(context.Context) (context.Context, context.CancelFunc){
		"a hedge's loser": context.WithCancel,
		"an attempt's timeout": func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 12*time.Millisecond)
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, false)
			ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
			require.Nil(t, e)
			b := &biller{deltas: 6, usage: llm.Usage{TotalTokens: 700}}
			attempt, stop := cut(ctx)
			defer stop()
			reads := 0
			_, err := metered(b).(llm.StreamingProvider).Stream(attempt, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error {
				if reads++; reads == 2 {
					stop()
				}
				return nil
			})
			require.Error(t, err)
			ended, endErr := b.result()
			assert.True(t, ended, "the call had stopped when Stream returned")
			assert.Error(t, endErr, "cut, not read to its end")
			done(nil, err)
			assert.Equal(t, 2000-150, r.left(t, "acme", 2000), "its reservation")
			assert.Empty(t, r.obs.all(), "nothing read on")
		})
	}
}

// A call read on is cut at its bounds — in time, and in bytes — and then
// keeps its reservation.
func TestACallReadOnIsCutAtItsBounds(t *testing.T) {
	for name, tc := range map[string]struct {
		b      *biller
		change func(*Config)
	}{
		"an upstream gone silent, past ReadOnTime": {&biller{deltas: 3, stall: true}, func(c *Config) { c.ReadOnTime = 30 * time.Millisecond }},
		"an answer past ReadOnBytes":               {&biller{deltas: 3, flood: 64 << 10, usage: llm.Usage{TotalTokens: 700}}, func(c *Config) { c.ReadOnBytes = 16 << 10 }},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRigWith(t, false, tc.change)
			_, err := streamAndHangUp(t, r, tc.b, 2)
			require.ErrorIs(t, err, context.Canceled)
			require.Eventually(t, func() bool { return r.obs.has("read_on:unbilled") }, 5*time.Second, time.Millisecond)
			ended, endErr := tc.b.result()
			assert.True(t, ended)
			assert.Error(t, endErr, "cut at the bound")
			assert.Equal(t, 2000-150, r.left(t, "acme", 2000), "no usage came: the reservation")
		})
	}
}

// No more calls are read on at once than MaxReadOn: one past it is cut
// when its caller leaves.
func TestNoMoreCallsAreReadOnAtOnceThanTheBound(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.MaxReadOn = 1; c.ReadOnTime = 5 * time.Second })
	first := &biller{deltas: 3, stall: true}
	_, err := streamAndHangUp(t, r, first, 1)
	require.ErrorIs(t, err, context.Canceled)
	second := &biller{deltas: 3, stall: true}
	_, err = streamAndHangUpAs(t, r, "globex", second, 1) // another tenant: acme's one slot is held by its call read on
	require.ErrorIs(t, err, context.Canceled)
	ended, _ := second.result()
	assert.True(t, ended, "the second was cut at once")
	assert.Equal(t, []string{"read_on:refused"}, r.obs.all())
	ended, _ = first.result()
	assert.False(t, ended, "the first is still read on")
	r.g.readOn.close()
	assert.Equal(t, []string{"read_on:refused", "read_on:unbilled"}, r.obs.all(), "closing the guard cuts it")
}

// Closing the guard cuts every call read on, charges each its
// reservation, and waits for them.
func TestClosingTheGuardCutsTheCallsReadOn(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.ReadOnTime = time.Hour })
	b := &biller{deltas: 3, stall: true}
	_, err := streamAndHangUp(t, r, b, 1)
	require.ErrorIs(t, err, context.Canceled)
	r.g.readOn.close()
	ended, _ := b.result()
	assert.True(t, ended, "close waited for the call")
	assert.Equal(t, []string{"read_on:unbilled"}, r.obs.all())
	assert.Equal(t, 2000-150, r.left(t, "acme", 2000))
}

// A call that ends before its caller leaves is charged as it ended, and a
// caller who reads it all leaves nothing to read on.
func TestACallThatEndsBeforeItsCallerLeavesIsNotReadOn(t *testing.T) {
	r := newRig(t, false)
	b := &biller{deltas: 3, usage: llm.Usage{TotalTokens: 90}}
	h, err := streamAndHangUp(t, r, b, 100)
	require.NoError(t, err)
	assert.Equal(t, 4, h.chunks(), "three deltas and the finish")
	assert.Equal(t, 2000-90, r.left(t, "acme", 2000))
	assert.Empty(t, r.obs.all())
}

// twoPhase streams before chunks of 1,000 bytes, waits a moment, then
// after more and its usage.
type twoPhase struct{ before, after int }

func (*twoPhase) Name() string         { return "up" }
func (*twoPhase) HonoursContext() bool { return true }
func (*twoPhase) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (p *twoPhase) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	f := chatapi.NewFrame("up-1")
	pad := strings.Repeat("x", 1000)
	for i := range p.before + p.after {
		if i == p.before {
			select {
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
				return llm.Completion{}, ctx.Err()
			}
		}
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &pad}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Usage: &llm.Usage{TotalTokens: 700}}, nil
}

// ReadOnBytes bounds what is read after the caller left, not the call: a
// caller who read a long answer and then hung up still pays the bill.
func TestReadOnBytesCountOnlyWhatIsReadAfterTheCallerLeft(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.ReadOnBytes = 20000 })
	caller, leave := context.WithCancel(t.Context())
	defer leave()
	ctx, done, e := r.admit(caller, tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	h := &hangUp{reads: 15, leave: leave} // 15 KB reached the caller; about 11 KB come after it left
	_, err := metered(&twoPhase{before: 16, after: 10}).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, h.emit)
	done(nil, err)
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return len(r.obs.all()) > 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"read_on:billed"}, r.obs.all(), "fewer than ReadOnBytes were read after the caller left")
	assert.Equal(t, 2000-700, r.left(t, "acme", 2000))
}

// A call read on to its end gives its place back: the bound is on calls
// at once, not in all.
func TestACallReadOnToItsEndFreesItsPlace(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.MaxReadOn = 1 })
	for i := range 2 {
		b := &biller{deltas: 4, usage: llm.Usage{TotalTokens: 300}}
		_, err := streamAndHangUp(t, r, b, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.Eventually(t, func() bool { return len(r.obs.all()) == i+1 }, 5*time.Second, time.Millisecond)
	}
	assert.Equal(t, []string{"read_on:billed", "read_on:billed"}, r.obs.all())
}

// Nothing reaches the caller's emit once Stream has returned: the caller's
// writer is the request's, and the request is gone.
func TestNoChunkReachesTheCallerAfterItLeft(t *testing.T) {
	r := newRig(t, false)
	b := &biller{deltas: 6, usage: llm.Usage{TotalTokens: 700}}
	caller, leave := context.WithCancel(t.Context())
	ctx, done, e := r.admit(caller, tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	var returned atomic.Bool
	var late atomic.Int32
	_, err := metered(b).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error {
		if returned.Load() {
			late.Add(1)
		}
		leave() // the connection closes, and this emit does not say so
		return nil
	})
	returned.Store(true)
	done(nil, err)
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return r.obs.has("read_on:billed") }, 5*time.Second, time.Millisecond)
	assert.Zero(t, late.Load(), "no chunk after the request returned")
}

// A call read on holds its tenant's in-flight slot until it ends: hanging
// up does not free a slot while the upstream still works for the tenant,
// so one tenant cannot hold more calls than its tier allows by leaving them.
func TestACallReadOnHoldsItsTenantsSlot(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.ReadOnTime = time.Hour })
	b := &biller{deltas: 3, stall: true}
	_, err := streamAndHangUp(t, r, b, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, _, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.NotNil(t, e, "the small tier has one slot, and the call read on holds it")
	assert.Equal(t, "too_many_concurrent_requests", e.Code)
	r.g.readOn.close() // the read-on ends (cut)
	_, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e, "its slot is back once the call ends")
	done(nil, nil)
}

// An answer that finished is answered, whoever closed the connection after
// it: charged the usage its upstream sent, not held to its reservation as
// a broken call would be; and the charge is what the call reports as
// Charged, for a caller told the usage of a continued stream.
func TestAFinishedAnswerThatThenDropsIsChargedAsAnswered(t *testing.T) {
	r := newRig(t, false)
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	b := &biller{deltas: 3, usage: llm.Usage{PromptTokens: 80, CompletionTokens: 3, TotalTokens: 83}, drops: true}
	c, err := metered(b).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error { return nil })
	require.Error(t, err, "the provider saw the reset")
	done(nil, nil)
	assert.Equal(t, 2000-83, r.left(t, "acme", 2000), "the usage, not the 150 reserved")
	assert.Equal(t, &llm.Usage{PromptTokens: 80, CompletionTokens: 3, TotalTokens: 83}, c.Charged)
}

// Every call reports what it was charged, however it ended: one that broke
// with no usage, its reservation, told as the prompt's share and the rest.
func TestEveryCallReportsWhatItWasCharged(t *testing.T) {
	r := newRig(t, false)
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	c, _ := metered(&biller{deltas: 3, stall: true}).(llm.StreamingProvider).Stream(func() context.Context {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}(), llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error { return nil })
	done(nil, nil)
	assert.Equal(t, &llm.Usage{PromptTokens: 100, CompletionTokens: 50, TotalTokens: 150}, c.Charged, "timed out after output: its reservation")
}
