// Command healthprobe is the container health check of images that have no
// shell and no curl (distroless, scratch): it GETs one URL and exits 0 on a
// 2xx answer within the timeout, 1 otherwise. docker-compose.yml runs it as
//
//	healthcheck: {test: ["CMD", "/healthprobe", "http://127.0.0.1:9464/readyz"]}
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "limit on the whole check")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: healthprobe [-timeout 2s] URL   (exit 0 on a 2xx answer, 1 otherwise)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := probe(ctx, fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, "healthprobe:", err)
		return 1
	}
	return 0
}

func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}
