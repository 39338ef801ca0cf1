package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pollInterval is how often watch looks at the files' sizes and times.
const pollInterval = 500 * time.Millisecond

func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	interval := fs.Duration("interval", pollInterval, "how often to look for saved files")
	noRace := fs.Bool("no-race", false, "run without the race detector")
	l, _, err := labCommand(e, fs, "watch", args)
	if err != nil {
		return err
	}
	kb := openKeyboard(e.stdin)
	defer kb.Close()
	// Polling modification times works on every file system, including the
	// mounted and remote ones where change notifications never arrive; Enter
	// re-runs by hand for anything polling misses.
	dir := filepath.Join(e.root, l.LabDir())
	last := snapshot(dir)
	for {
		if err := testLab(ctx, e, l, !*noRace, ""); err != nil && !errors.Is(err, errRed) {
			return err
		}
		fmt.Fprintf(e.stdout, "\nwatching %s — save a file to re-run, Enter to re-run now, q to quit\n", l.LabDir())
		var quit bool
		if last, quit = waitForChange(ctx, kb.keys, dir, last, *interval); quit {
			return nil
		}
	}
}

// waitForChange returns when a file in dir changed (its new snapshot), on
// Enter (a re-run by hand), or with quit set on q or when ctx ends.
func waitForChange(ctx context.Context, keys <-chan byte, dir, last string, interval time.Duration) (snap string, quit bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return last, true
		case k, ok := <-keys:
			switch {
			case !ok:
				keys = nil // no more keys: keep polling the files
			case k == 'q' || k == 'Q':
				return last, true
			case k == '\n' || k == '\r':
				return snapshot(dir), false
			}
		case <-tick.C:
			if now := snapshot(dir); now != last {
				return now, false
			}
		}
	}
}

// snapshot is a cheap fingerprint of the .go files in dir: names, sizes, mtimes.
func snapshot(dir string) string {
	var b strings.Builder
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if !strings.HasSuffix(en.Name(), ".go") && en.Name() != "go.mod" {
			continue
		}
		if fi, err := en.Info(); err == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", en.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// keyboard delivers key presses to watch, one at a time. It owns the
// goroutine that reads them: Close ends that goroutine and waits for it.
//
// On a terminal it reads /dev/tty in cbreak mode (each key at once, no
// Enter needed) through a descriptor of its own, which the runtime polls,
// so a read deadline can end a read that would otherwise block forever.
// Another reader is read as it is: Close closes it if it can be closed.
type keyboard struct {
	keys    chan byte
	stop    chan struct{}
	done    chan struct{}
	src     io.Reader
	unblock func() // makes a blocked Read return
	restore func() // puts the terminal back as it was
}

func openKeyboard(stdin io.Reader) *keyboard {
	kb := &keyboard{
		keys: make(chan byte, 16), stop: make(chan struct{}), done: make(chan struct{}),
		src: stdin, unblock: func() {}, restore: func() {},
	}
	switch in := stdin.(type) {
	case *os.File:
		tty, restore, err := openTTY(in)
		if err != nil {
			close(kb.keys) // no keyboard (not a terminal): watch polls files, Ctrl-C quits
			close(kb.done)
			return kb
		}
		kb.src = tty
		kb.unblock = func() { _ = tty.SetReadDeadline(time.Now()) }
		kb.restore = func() { restore(); tty.Close() }
	case io.Closer:
		kb.unblock = func() { in.Close() }
	}
	go kb.read()
	return kb
}

func (kb *keyboard) read() {
	defer close(kb.done)
	defer close(kb.keys)
	buf := make([]byte, 1)
	for {
		n, err := kb.src.Read(buf)
		if n == 1 {
			select {
			case kb.keys <- buf[0]:
			case <-kb.stop:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Close ends the reading goroutine, waits for it, and restores the terminal.
func (kb *keyboard) Close() {
	select {
	case <-kb.stop:
		return // closed already
	default:
	}
	close(kb.stop)
	kb.unblock()
	<-kb.done
	kb.restore()
}

// openTTY opens the terminal stdin is on for reading single keys, and
// returns what restores its mode. It fails when stdin is not a terminal or
// the terminal cannot be read with a deadline.
func openTTY(stdin *os.File) (*os.File, func(), error) {
	fi, err := stdin.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil, nil, errors.New("stdin is not a terminal")
	}
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return nil, nil, err
	}
	if err := tty.SetReadDeadline(time.Time{}); err != nil {
		tty.Close() // not pollable: nothing could end a blocked read
		return nil, nil, err
	}
	saved, err := stty("-g")
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	if _, err := stty("-icanon", "-echo", "min", "1"); err != nil {
		tty.Close()
		return nil, nil, err
	}
	return tty, func() { _, _ = stty(strings.TrimSpace(saved)) }, nil
}

// stty runs stty(1) on the terminal, through a descriptor of its own: one
// handed to a child process is switched to blocking mode, which would stop
// the keyboard's read deadline from working.
func stty(args ...string) (string, error) {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return "", err
	}
	defer tty.Close()
	cmd := exec.Command("stty", args...)
	cmd.Stdin = tty
	out, err := cmd.Output()
	return string(out), err
}
