package streaming

// A caller gone before the relay starts: nothing to open. Each upstream
// call is billed, and one opened for a caller already gone is paid for
// nobody. (The stream vectors' widening found the reference opened the
// first target, and closed it, in this case.)

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
)

func TestACallerGoneBeforeTheRelayStartsOpensNothing(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		t.Run(cause.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				if cause == context.DeadlineExceeded {
					ctx, cancel = context.WithTimeout(t.Context(), 0)
				}
				cancel()
				up := plays("up", say(0, "Hi"), finish(0, "stop"))
				cl := newCaller()
				_, err := Relay(ctx, limits, targets(up), cl.emit)
				assert.ErrorIs(t, err, cause, "the caller's own reason")
				up.mu.Lock()
				defer up.mu.Unlock()
				assert.Empty(t, up.prefills, "no upstream is opened for a caller already gone")
			})
		})
	}
}
