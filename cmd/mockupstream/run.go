package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/providers/simhttp"
)

// EnvPrefix starts the environment variable of every flag:
// MOCKUPSTREAM_ERROR_RATE sets -error-rate (a flag on the command line wins).
const EnvPrefix = "MOCKUPSTREAM_"

// config is the command's settings.
type config struct {
	addr       string
	name       string
	model      string
	latency    time.Duration
	jitter     time.Duration
	chunkDelay time.Duration
	errorRate  float64
	errors     string
	retryAfter time.Duration
	outages    []string
	slow       []string
	capacity   int
	seed       uint64
}

// list is a repeatable flag. From the environment it takes several values
// separated by ";".
type list struct{ v *[]string }

func (l list) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ";")
}

func (l list) Set(s string) error {
	for _, part := range strings.Split(s, ";") {
		if part = strings.TrimSpace(part); part != "" {
			*l.v = append(*l.v, part)
		}
	}
	return nil
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "listen address")
	fs.StringVar(&c.name, "name", "mock", "provider name (in answers and error messages)")
	fs.StringVar(&c.model, "model", "mock-1", "model reported when a request names none")
	fs.DurationVar(&c.latency, "latency", 80*time.Millisecond, "time to the first token (or the whole answer)")
	fs.DurationVar(&c.jitter, "jitter", 40*time.Millisecond, "latency varies uniformly by ± this")
	fs.DurationVar(&c.chunkDelay, "chunk-delay", 15*time.Millisecond, "time between streamed chunks (inter-token gap)")
	fs.Float64Var(&c.errorRate, "error-rate", 0, "share of calls that fail, 0..1")
	fs.StringVar(&c.errors, "errors", "500", "failure kinds drawn for failing calls, |-separated: 500, 429, 400, reset, timeout, cut (a stream drops halfway)")
	fs.DurationVar(&c.retryAfter, "retry-after", time.Second, "Retry-After of a 429")
	fs.Var(list{&c.outages}, "outage", "an outage window from start: every call in it gets 503, repeatable: 30s-60s")
	fs.Var(list{&c.slow}, "slow", "a brown-out window from start: a share of calls takes longer, repeatable: start-end:extra@share, e.g. 20s-40s:800ms@0.1")
	fs.IntVar(&c.capacity, "capacity", 0, "calls served at full speed at once; above that each call slows in proportion (0: no limit)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the latency and failure draws: the same seed replays the same sequence")
}

// spec is the sim provider spec the flags stand for.
func (c *config) spec() string {
	f := []string{"name=" + c.name, "model=" + c.model,
		"latency=" + c.latency.String(), "jitter=" + c.jitter.String(), "chunk-delay=" + c.chunkDelay.String(),
		"error-rate=" + strconv.FormatFloat(c.errorRate, 'g', -1, 64), "errors=" + c.errors,
		"retry-after=" + c.retryAfter.String(), "capacity=" + strconv.Itoa(c.capacity), "seed=" + strconv.FormatUint(c.seed, 10)}
	for _, o := range c.outages {
		f = append(f, "outage="+o)
	}
	for _, s := range c.slow {
		f = append(f, "slow="+s)
	}
	return strings.Join(f, ",")
}

// parse reads args, then MOCKUPSTREAM_<FLAG> for every flag not given.
func parse(args []string, stderr io.Writer, lookup func(string) (string, bool)) (config, error) {
	var c config
	fs := flag.NewFlagSet("mockupstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: mockupstream [flags]

A simulated OpenAI-compatible upstream: POST /v1/chat/completions (stream or
not), GET /v1/models, GET /healthz. Every flag can also be set as
%s<FLAG> (upper case, dashes as underscores, e.g. %sERROR_RATE=0.1;
repeatable flags take several values separated by ";"); a flag wins.
%sAPI_KEY, if set, is the bearer token every /v1 request must carry.

flags:
`, EnvPrefix, EnvPrefix, EnvPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(env); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return c, errors.Join(errs...)
}

// run is main without the process: it serves until ctx ends, then shuts
// down within 5 s. It returns the exit code: 0 after a clean stop, 1 if
// serving failed, 2 for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ln net.Listener) int {
	c, err := parse(args, stderr, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mockupstream:", err)
		return 2
	}
	pc, err := sim.Parse(c.spec())
	if err != nil {
		fmt.Fprintln(stderr, "mockupstream:", err)
		return 2
	}
	p, err := sim.New(pc)
	if err != nil {
		fmt.Fprintln(stderr, "mockupstream:", err)
		return 2
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", c.addr); err != nil {
			fmt.Fprintln(stderr, "mockupstream: listen:", err)
			return 1
		}
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	srv := &http.Server{Handler: simhttp.Handler(p, simhttp.Options{APIKey: os.Getenv(EnvPrefix + "API_KEY")}),
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stdout, "mockupstream listening on http://%s/v1  model: %s  seed: %d\n", ln.Addr(), c.model, c.seed)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintln(stderr, "mockupstream:", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-served
	fmt.Fprintln(stdout, "mockupstream stopped")
	return 0
}
