//go:build failsafe

package adaptive

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
)

// failsafe-go's adaptive limiter, for the comparison in README.md. Behind a
// build tag so the default build (and a learner's first make lab-09) does not
// compile failsafe-go.
func init() {
	benchImpls = append(benchImpls, benchImpl{"failsafe", func(*testing.B) func(context.Context) error {
		l := adaptivelimiter.NewBuilder[any]().WithLimits(1, 1000, 1000).Build()
		return func(ctx context.Context) error {
			p, err := l.AcquirePermit(ctx)
			if err != nil {
				return err
			}
			p.Record()
			return nil
		}
	}})
}
