package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterEnv names an existing Redis Cluster for Cluster to use instead of
// starting one: comma-separated seed addresses, e.g.
// 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002.
const ClusterEnv = "REDIS_CLUSTER_ADDRS"

// clusterNodes is how many masters Cluster starts: the fewest that Redis
// Cluster accepts, and enough for keys to spread over several nodes.
const clusterNodes = 3

// clusterFinder is where a cluster may come from; tests replace its
// functions to exercise the skip-or-fail rules without touching the machine.
type clusterFinder struct {
	getenv   func(string) string
	lookPath func(string) (string, error)
	// patience is how long an existing cluster (ClusterEnv) may take to
	// report ok, e.g. while CI is still creating it.
	patience time.Duration
}

var defaultClusterFinder = clusterFinder{getenv: os.Getenv, lookPath: exec.LookPath, patience: 10 * time.Second}

// Cluster returns a client to a real Redis Cluster for this test, closed
// when the test ends. It looks, in this order, for:
//
//  1. REDIS_CLUSTER_ADDRS, when set: an existing cluster (the keys under
//     Prefix(tb) are deleted at the end of the test);
//  2. redis-server and redis-cli on PATH: three masters started in cluster
//     mode on free loopback ports, in a temporary directory, joined with
//     `redis-cli --cluster create`, and stopped when the test ends;
//  3. none: the test skips — or fails, with REDIS_INTEGRATION_REQUIRED=1.
//
// It returns once every node reports cluster_state:ok, so the first
// command of the test already finds every slot served. Starting a cluster
// takes about a second; a test that needs several checks should share one.
// Needs redis-server 7 or later (for --cluster-port).
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	return defaultClusterFinder.cluster(tb)
}

func (f clusterFinder) cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	var (
		addrs []string
		how   string
		err   error
	)
	if env := f.getenv(ClusterEnv); env != "" {
		addrs, how = strings.Split(env, ","), ClusterEnv
		err = waitClusterOK(addrs, 0, f.patience)
		if err != nil {
			err = fmt.Errorf("%w: %s=%s is not a healthy cluster: %v", ErrNoRedis, ClusterEnv, env, err)
		}
	} else {
		how = "3 redis-server processes started for this test"
		addrs, err = f.start(tb)
	}
	if err != nil {
		if f.getenv(RequiredEnv) == "1" {
			tb.Fatalf("redistest: %s=1 but %v", RequiredEnv, err)
		}
		tb.Skipf("redistest: skipped, %v (set %s, or install redis-server and redis-cli; %s=1 turns this skip into a failure)", err, ClusterEnv, RequiredEnv)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	prefix := Prefix(tb)
	tb.Cleanup(func() {
		if how == ClusterEnv { // a cluster we do not own: take our keys back
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				iter := node.Scan(ctx, 0, prefix+"*", 100).Iterator()
				for iter.Next(ctx) {
					node.Del(ctx, iter.Val())
				}
				return iter.Err()
			})
		}
		_ = rdb.Close()
	})
	tb.Logf("%s cluster at %s (%s)", Marker, strings.Join(addrs, ","), how)
	return rdb
}

// start runs three cluster-mode redis-servers, joins them into a cluster,
// and registers their stop with tb.Cleanup.
func (f clusterFinder) start(tb testing.TB) ([]string, error) {
	tb.Helper()
	server, err := f.lookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %s unset and no redis-server on PATH", ErrNoRedis, ClusterEnv)
	}
	cli, err := f.lookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("%w: %s unset and no redis-cli on PATH (needed to create the cluster)", ErrNoRedis, ClusterEnv)
	}
	root := tb.TempDir()
	addrs := make([]string, 0, clusterNodes)
	for i := range clusterNodes {
		addr, stop, err := startClusterNode(server, filepath.Join(root, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, fmt.Errorf("%w: cluster node %d: %v", ErrNoRedis, i, err)
		}
		tb.Cleanup(stop)
		addrs = append(addrs, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: redis-cli --cluster create: %v: %s", ErrNoRedis, err, clusterTail(out, 5))
	}
	if err := waitClusterOK(addrs, clusterNodes, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoRedis, err)
	}
	return addrs, nil
}

// startClusterNode runs one cluster-mode redis-server on free loopback
// ports (one for clients, one for the cluster bus), keeping its files in dir.
func startClusterNode(bin, dir string) (addr string, stop func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	bus, err := freePort()
	if err != nil {
		return "", nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath)
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping("redis://" + addr)
		if err == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("no answer on %s after 10s: %w; log: %s", addr, err, clusterTail(log, 5))
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's port, not test timing
	}
}

// waitClusterOK polls every node until each reports cluster_state:ok and,
// if known > 0, knows that many nodes.
func waitClusterOK(addrs []string, known int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := clusterOK(addrs, known)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %s: %w", within, err)
		}
		time.Sleep(50 * time.Millisecond) // polling child processes, not test timing
	}
}

func clusterOK(addrs []string, known int) error {
	for _, addr := range addrs {
		info, err := clusterInfo(addr)
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", addr)
		}
		if known > 0 && !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(known)+"\r\n") {
			return fmt.Errorf("%s does not know all %d nodes yet", addr, known)
		}
	}
	return nil
}

func clusterInfo(addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return rdb.ClusterInfo(ctx).Result()
}

// clusterTail is the tail of a child process's output, for an error message.
func clusterTail(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}
