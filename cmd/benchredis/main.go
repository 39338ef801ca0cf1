// Command benchredis measures the shared rate limiter's decisions per
// second on one real Redis, side by side with go-redis/redis_rate, in
// interleaved rounds: lab 07's limiter through the pipelining Scripter
// (gateway/redispipe, what secure_app runs: rueidis on one connection
// for concurrent calls, go-redis for a lone one), the same limiter on
// go-redis's AutoPipeliner as it is (the pipeline the Scripter did not
// choose; it honours no deadline once a call is queued), on rueidis as it
// comes (every call pipelined, on its default connections), on a plain
// go-redis client, and redis_rate. Each round also prints the CPU each
// decision took in this process and in Redis. Its last line is
//
//	redis limiter: ours N decisions/s, redis_rate M decisions/s, ratio R
//
// at -goroutines (32). It also prints each one's p50 decision latency with
// one goroutine, where pipelining must cost nothing. `make bench-redis`
// starts a redis-server of its own when REDIS_URL is unset.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/production-go/gateway-lab/gateway/redispipe"
	distlimit "github.com/production-go/gateway-lab/solutions/07-distlimit"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchredis:", err)
		}
		os.Exit(2)
	}
}

// The implementations' names as the report prints them.
const (
	nameAutoPipeliner = "go-redis AutoPipeliner"
	nameRueidis       = "rueidis as it comes"
	namePlain         = "plain go-redis"
)

type impl struct {
	name  string
	allow func(ctx context.Context, key string) error
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchredis", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", os.Getenv("REDIS_URL"), "Redis `URL` (default $REDIS_URL); the benchmark writes keys under -prefix and deletes them")
	goroutines := fs.Int("goroutines", 32, "concurrent callers for the throughput rounds")
	dur := fs.Duration("duration", 2*time.Second, "length of each measurement")
	rounds := fs.Int("rounds", 5, "interleaved rounds; the medians are reported")
	keys := fs.Int("keys", 100, "distinct tenants the callers spread over")
	only := fs.String("only", "", "run only this implementation (ours | autopipeliner | rueidis | plain | redis_rate), for profiling")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
	prefix := fs.String("prefix", "benchredis:"+strconv.Itoa(os.Getpid())+":", "key prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *url == "":
		return errors.New("no Redis: pass -url or set REDIS_URL (make bench-redis starts one)")
	case *goroutines < 1 || *rounds < 1 || *keys < 1 || *dur <= 0:
		return errors.New("-goroutines, -rounds, -keys and -duration must be positive")
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts, err := redis.ParseURL(*url)
	if err != nil {
		return err
	}
	impls, closeAll, err := implementations(opts, *url, *prefix, *goroutines)
	defer closeAll()
	if err != nil {
		return err
	}
	if *only != "" {
		short := map[string]string{"autopipeliner": nameAutoPipeliner, "rueidis": nameRueidis, "ours": "ours", "plain": namePlain, "redis_rate": "redis_rate"}
		i := slices.IndexFunc(impls, func(im impl) bool { return im.name == short[*only] })
		if i < 0 {
			return fmt.Errorf("-only %q: want ours, autopipeliner, rueidis, plain or redis_rate", *only)
		}
		impls = impls[i : i+1]
	}
	names := make([]string, *keys)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	probeOpts, err := redis.ParseURL(*url) // options of its own: go-redis keeps state in them
	if err != nil {
		return err
	}
	probe := redis.NewClient(probeOpts)
	defer probe.Close()
	res, err := measure(ctx, probe, impls, names, *goroutines, *rounds, *dur, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "medians of %d interleaved rounds of %s each, one Redis at %s (CPU per decision at %d goroutines: this process / Redis):\n",
		*rounds, *dur, redactURL(opts), *goroutines)
	for _, im := range impls {
		fmt.Fprintf(stdout, "  %-22s %9.0f decisions/s at %d goroutines   CPU %4.1f / %4.1f µs   p50 %s at 1 goroutine\n", im.name,
			median(res.rate[im.name]), *goroutines, median(res.client[im.name]), median(res.redis[im.name]), medianDur(res.p50[im.name]).Round(100*time.Nanosecond))
	}
	if *only == "" {
		compare(stdout, res)
	}
	return nil
}

// compare prints ours against redis_rate. The ratio is taken within each
// round, from runs seconds apart, and its median reported: this machine's
// speed drifts more over a run than between neighbouring measurements
// (docs/performance.md).
func compare(stdout io.Writer, res results) {
	ratios := make([]float64, len(res.rate["ours"]))
	for i, o := range res.rate["ours"] {
		ratios[i] = o / res.rate["redis_rate"][i]
	}
	fmt.Fprintf(stdout, "ours / redis_rate within each round: %s; the ratio below is their median\n", list(ratios))
	ours, theirs := median(res.rate["ours"]), median(res.rate["redis_rate"])
	fmt.Fprintf(stdout, "redis limiter: ours %.0f decisions/s, redis_rate %.0f decisions/s, ratio %.2f\n", ours, theirs, median(ratios))
}

// results are each implementation's measurements, one per round.
type results struct {
	rate          map[string][]float64       // decisions per second at n goroutines
	client, redis map[string][]float64       // CPU per decision, µs, in this process and in Redis
	p50           map[string][]time.Duration // one caller's median decision
}

// measure runs the interleaved rounds: each implementation's throughput
// at n goroutines, then each one's lone-caller p50.
func measure(ctx context.Context, probe *redis.Client, impls []impl, names []string, goroutines, rounds int, dur time.Duration, stderr io.Writer) (results, error) {
	res := results{rate: map[string][]float64{}, client: map[string][]float64{}, redis: map[string][]float64{}, p50: map[string][]time.Duration{}}
	for r := range rounds {
		// Rotate the order each round, so no implementation always runs
		// first (cold) or last (after the others warmed the server); the
		// lone-caller latencies are taken after every throughput phase of
		// the round, each after a GC, so none pays for another's garbage.
		for i := range impls {
			im := impls[(i+r)%len(impls)]
			c0, r0 := clientCPU(), redisCPU(ctx, probe)
			n, rate, err := throughput(ctx, im, names, goroutines, dur)
			if err != nil {
				return res, fmt.Errorf("%s: %w", im.name, err)
			}
			c1, r1 := clientCPU(), redisCPU(ctx, probe)
			cl, rd := (c1-c0).Seconds()*1e6/float64(n), (r1-r0)*1e6/float64(n)
			res.rate[im.name] = append(res.rate[im.name], rate)
			res.client[im.name] = append(res.client[im.name], cl)
			res.redis[im.name] = append(res.redis[im.name], rd)
			fmt.Fprintf(stderr, "round %d/%d: %-22s %9.0f decisions/s at %d goroutines, CPU per decision %.1f µs here, %.1f µs in Redis\n",
				r+1, rounds, im.name, rate, goroutines, cl, rd)
		}
		for i := range impls {
			im := impls[(i+r)%len(impls)]
			runtime.GC()
			lat, err := serial(ctx, im, names, dur/2)
			if err != nil {
				return res, fmt.Errorf("%s: %w", im.name, err)
			}
			res.p50[im.name] = append(res.p50[im.name], lat)
			fmt.Fprintf(stderr, "round %d/%d: %-22s p50 %s alone\n", r+1, rounds, im.name, lat.Round(100*time.Nanosecond))
		}
	}
	return res, nil
}

// implementations builds the limiters side by side on one Redis; closeAll
// closes what was opened (the Scripter before its client), whatever failed.
func implementations(opts *redis.Options, url, prefix string, goroutines int) (impls []impl, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	opts.PoolSize = 2 * goroutines // no caller waits for a connection
	// As secure_app builds its client: deadlines honoured, so a lone call
	// may skip the pipeline (see gateway/redispipe).
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	closers = append(closers, func() { cleanup(rdb, prefix); _ = rdb.Close() })
	pipe, err := redispipe.New(rdb)
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, func() { _ = pipe.Close() })
	cfg := distlimit.Config{Rate: 1e6, Burst: 1e6, Timeout: time.Second} // always allowed: the cost of a decision, not of refusals
	cfg.Prefix = prefix + "piped:"
	piped, err := distlimit.New(pipe, cfg)
	if err != nil {
		return nil, closeAll, err
	}
	cfg.Prefix = prefix + "plain:"
	plain, err := distlimit.New(rdb, cfg)
	if err != nil {
		return nil, closeAll, err
	}
	// go-redis's own pipeline, handed to the limiter as it is: what the
	// Scripter would reach on go-redis alone (its blocking face honours
	// no deadline once a call is queued, so secure_app could not run it
	// without a goroutine per call on top).
	rawAP, err := rdb.AutoPipeline()
	if err != nil {
		return nil, closeAll, err
	}
	cfg.Prefix = prefix + "raw:"
	raw, err := distlimit.New(rawAP, cfg)
	if err != nil {
		return nil, closeAll, err
	}
	rue, err := newRueidis(url)
	if err != nil {
		return nil, closeAll, fmt.Errorf("rueidis: %w", err)
	}
	closers = append(closers, rue.close)
	cfg.Prefix = prefix + "rueidis:"
	onRueidis, err := distlimit.New(rue, cfg)
	if err != nil {
		return nil, closeAll, err
	}
	rr := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}
	impls = []impl{
		// ours and redis_rate next to each other: with the order rotated
		// each round, the two run back to back in four rounds of five.
		{"ours", func(ctx context.Context, k string) error { _, err := piped.Allow(ctx, k); return err }},
		{"redis_rate", func(ctx context.Context, k string) error {
			_, err := rr.Allow(ctx, prefix+"rr:"+k, limit)
			return err
		}},
		{nameAutoPipeliner, func(ctx context.Context, k string) error { _, err := raw.Allow(ctx, k); return err }},
		{nameRueidis, func(ctx context.Context, k string) error { _, err := onRueidis.Allow(ctx, k); return err }},
		{namePlain, func(ctx context.Context, k string) error { _, err := plain.Allow(ctx, k); return err }},
	}
	return impls, closeAll, nil
}

// throughput runs n callers for d and returns how many decisions they
// made and how many per second.
func throughput(ctx context.Context, im impl, keys []string, n int, d time.Duration) (int64, float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var count atomic.Int64
	var first error
	var once sync.Once
	stop := time.Now().Add(d)
	started := time.Now()
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			for i := g; time.Now().Before(stop); i++ {
				if err := im.allow(ctx, keys[i%len(keys)]); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	return count.Load(), float64(count.Load()) / time.Since(started).Seconds(), first
}

// serial runs one caller for d and returns its median decision latency.
func serial(ctx context.Context, im impl, keys []string, d time.Duration) (time.Duration, error) {
	var lat []time.Duration
	for i, stop := 0, time.Now().Add(d); time.Now().Before(stop); i++ {
		t0 := time.Now()
		if err := im.allow(ctx, keys[i%len(keys)]); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return medianDur(lat), nil
}

// list prints ratios to two places, in round order.
func list(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianDur(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func redactURL(o *redis.Options) string { return o.Addr + "/" + strconv.Itoa(o.DB) }

// cleanup deletes the benchmark's keys.
func cleanup(rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			rdb.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Del(ctx, batch...)
	}
}

// clientCPU is the CPU time this process has used.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU seconds Redis has used (0 if INFO says nothing).
func redisCPU(ctx context.Context, c *redis.Client) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}
