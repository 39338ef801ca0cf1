package mutation

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// SchemaBuild is one package built with its mutants folded in: its test
// binaries, built once each (without and with the race detector) and run
// once per mutant.
type SchemaBuild struct {
	schema    *mutantSchema
	root      string // the repository, where go test -c runs
	pkg       string // the package, "./dir"
	tmp       string // where the binaries go
	test2json string
	path      string // PATH for the binaries: $GOROOT/bin first, as go test sets it
	// overlay lays the schema's files over the package for the build.
	overlay func(files map[string][]byte) (*gotest.Overlay, error)
	logf    func(format string, args ...any)
	once    [2]sync.Once
	bin     [2]string // "" once a build failed: mutants build on their own
}

// NewSchemaBuild folds mutants into ref. It is nil when none fold or the
// tools it needs are missing: the mutants then build one by one, as any
// that do not fold always do.
func NewSchemaBuild(ctx context.Context, root, pkg string, ref map[string][]byte, ms []SchemaMutant,
	overlay func(map[string][]byte) (*gotest.Overlay, error), logf func(string, ...any)) *SchemaBuild {
	if len(ms) == 0 {
		return nil
	}
	schema, err := buildMutantSchema(ref, ms)
	if err != nil || len(schema.IDs) == 0 {
		return nil
	}
	t2j, err := labfs.GoOutput(ctx, root, "tool", "-n", "test2json")
	if err != nil {
		logf("mutants build one by one (no test2json: %v)", err)
		return nil
	}
	goroot, err := labfs.GoOutput(ctx, root, "env", "GOROOT")
	if err != nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "labctl-schema-")
	if err != nil {
		return nil
	}
	path := filepath.Join(strings.TrimSpace(string(goroot)), "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	return &SchemaBuild{schema: schema, root: root, pkg: pkg, tmp: tmp, test2json: strings.TrimSpace(string(t2j)),
		path: path, overlay: overlay, logf: logf}
}

// close removes the binaries.
func (b *SchemaBuild) Close() {
	if b != nil {
		_ = os.RemoveAll(b.tmp)
	}
}

// id is the number that selects a mutant; the empty name is the
// reference itself (0). ok is false for a mutant that did not fold, or
// when there is no schema.
func (b *SchemaBuild) ID(name string) (int, bool) {
	if b == nil {
		return 0, false
	}
	if name == "" {
		return 0, true
	}
	id, ok := b.schema.IDs[name]
	return id, ok
}

// binary builds the test binary once, with or without the race detector;
// "" means it did not build (a mutant that does not compile, say), and
// the mutants build on their own instead.
func (b *SchemaBuild) binary(ctx context.Context, race bool) string {
	i := slot(race)
	b.once[i].Do(func() {
		bin := filepath.Join(b.tmp, fmt.Sprintf("mutants-%d.test", i))
		if err := b.build(ctx, bin, race); err != nil {
			if ctx.Err() == nil {
				b.logf("mutants build one by one (their shared build failed: %v)", err)
			}
			return
		}
		b.bin[i] = bin
	})
	return b.bin[i]
}

// Built reports whether the binary with (race) or without the race
// detector was built: not before a run needed it, nor after its build
// failed.
func (b *SchemaBuild) Built(race bool) bool {
	return b != nil && b.bin[slot(race)] != ""
}

// slot is where the binary with or without the race detector is kept.
func slot(race bool) int {
	if race {
		return 1
	}
	return 0
}

func (b *SchemaBuild) build(ctx context.Context, bin string, race bool) error {
	ov, err := b.overlay(b.schema.Files)
	if err != nil {
		return err
	}
	defer ov.Close()
	overlay, err := ov.File()
	if err != nil {
		return err
	}
	args := []string{"test", "-c", "-o", bin, "-vet=off", "-overlay", overlay}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, b.pkg)...)
	cmd.Dir = b.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%w: %s", err, first)
	}
	return nil
}

// SchemaRunOptions is one run of a schema's binary.
type SchemaRunOptions struct {
	ID      int
	Race    bool
	Run     string // -test.run; "" runs every test
	Skip    []string
	Timeout time.Duration // -test.timeout; 0: go test's default
	// HangLimit stops the binary once a test running alone has run this
	// long; 0 never does.
	HangLimit time.Duration
}

// run runs the binary as mutant o.ID, the way go test -json runs a test
// binary; used is false when there is no binary to run, and the caller
// builds the mutant on its own.
func (b *SchemaBuild) Run(ctx context.Context, o SchemaRunOptions) (p *gotest.PackageResult, used bool, err error) {
	bin := b.binary(ctx, o.Race)
	if bin == "" {
		return nil, false, ctx.Err()
	}
	pkg := strings.TrimPrefix(b.pkg, "./")
	p, err = gotest.RunBinary(ctx, gotest.BinaryOptions{
		Binary: bin, Name: "the mutants' test binary", Test2JSON: b.test2json,
		Dir: filepath.Join(b.root, filepath.FromSlash(pkg)), Package: pkg,
		Env:  []string{schemaEnv + "=" + strconv.Itoa(o.ID), "PATH=" + b.path},
		Race: o.Race, Run: o.Run, Skip: o.Skip, Timeout: o.Timeout, HangLimit: o.HangLimit,
	})
	return p, true, err
}
