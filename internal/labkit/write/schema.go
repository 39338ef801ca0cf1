package write

import (
	"context"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/mutation"
)

// startSchema folds the track's mutants about to run into one build,
// unless OneByOne.
func (w *writeRun) startSchema(ctx context.Context, pending []Mutant) {
	if w.opts.OneByOne {
		return
	}
	var ms []mutation.SchemaMutant
	for _, m := range pending {
		if _, patched, err := w.apply(m.Patch); err == nil {
			ms = append(ms, mutation.SchemaMutant{Name: m.Name, Patched: patched})
		}
	}
	w.schema = mutation.NewSchemaBuild(ctx, w.opts.Root, w.pkg(), w.kit.Ref, ms, w.overlay, func(format string, args ...any) {
		w.logf("write: "+format, args...)
	})
}

// runSchema runs the counting tests in the schema's binary as mutant id;
// a mutant's run (never the null runs, which say which tests count) is
// stopped once a test running alone is past the limit.
func (w *writeRun) runSchema(ctx context.Context, id int, counting, skip []string, race bool) (*gotest.PackageResult, bool, error) {
	o := mutation.SchemaRunOptions{ID: id, Race: race, Run: gotest.ExactNames(counting), Skip: skip, Timeout: w.mutantTimeout}
	if id != 0 {
		o.HangLimit = w.opts.limit() + time.Second
	}
	return w.schema.Run(ctx, o)
}
