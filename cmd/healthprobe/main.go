// Command healthprobe is the container health check of images that have no
// shell and no curl (distroless, scratch): it GETs one URL and exits 0 on a
// 2xx answer within the timeout, 1 otherwise. docker-compose.yml runs it as
//
//	healthcheck: {test: ["CMD", "/healthprobe", "http://127.0.0.1:9464/readyz"]}
package main

import (
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
	if err := probe(&http.Client{Timeout: *timeout}, fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, "healthprobe:", err)
		return 1
	}
	return 0
}

// probe GETs url with client, whose timeout bounds the whole check: the
// connection, the answer and reading its body.
func probe(client *http.Client, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
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
