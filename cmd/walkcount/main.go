// Command walkcount reads a `dlv trace` of one request through the gateway
// and counts its walk through the house: each package of the module is a
// room, a stay is a stretch of the request's calls inside one room, and a
// return is a stay in a room the walk had already left. docs/architecture.md
// explains the measure; scripts/walk.sh records the trace and runs this.
//
//	walkcount [-from FUNC] [-v] < trace.txt
//
// The walk starts at the first call of FUNC (by default httpapi's
// (*Server).ServeHTTP) and ends when that call returns. Every goroutine's
// calls in between count, in the order the trace shows them.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// module is the prefix of the functions the walk counts.
const module = "github.com/production-go/gateway-lab/"

var event = regexp.MustCompile(`^(>>?) goroutine\((\d+)\): (.*)$`)

// function is the function a trace line's rest names: up to " => " on a
// return, else up to the "(" that opens the arguments — not a method's
// receiver, "(*T)", which follows a dot.
func function(rest string) string {
	if i := strings.Index(rest, " => "); i >= 0 {
		return rest[:i]
	}
	for i := 1; i < len(rest); i++ {
		if rest[i] == '(' && rest[i-1] != '.' {
			return rest[:i]
		}
	}
	return rest
}

// Walk is a request's way through the rooms.
type Walk struct {
	Stays []string // the room of each stay, in order
	Rooms []string // each room, in the order first entered
}

// Returns is how many stays were in a room already left.
func (w Walk) Returns() int { return len(w.Stays) - len(w.Rooms) }

// room is the package of a traced function, module-relative.
func room(fn string) string {
	fn = strings.TrimPrefix(fn, module)
	slash := strings.LastIndex(fn, "/")
	if dot := strings.Index(fn[slash+1:], "."); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// Read reads a trace and returns the walk of the first call of from
// (a function name, module-relative), or an error when the trace has none.
func Read(r io.Reader, from string) (Walk, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	stacks := map[string][]string{}
	var seq []string
	started, g0 := false, ""
	for sc.Scan() {
		m := event.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[3], module) {
			continue
		}
		kind, g, fn := m[1], m[2], strings.TrimPrefix(function(m[3]), module)
		if !started {
			if kind != ">" || fn != from {
				continue
			}
			started, g0 = true, g
		}
		st := stacks[g]
		if kind == ">" {
			stacks[g] = append(st, room(fn))
			seq = append(seq, room(fn))
			continue
		}
		if len(st) > 0 {
			st = st[:len(st)-1]
			stacks[g] = st
		}
		if g == g0 && fn == from && len(st) == 0 {
			break
		}
		if len(st) > 0 {
			seq = append(seq, st[len(st)-1])
		}
	}
	if err := sc.Err(); err != nil {
		return Walk{}, err
	}
	if !started {
		return Walk{}, fmt.Errorf("walkcount: the trace has no call of %s", from)
	}
	var w Walk
	seen := map[string]bool{}
	for i, p := range seq {
		if i > 0 && seq[i-1] == p {
			continue
		}
		w.Stays = append(w.Stays, p)
		if !seen[p] {
			seen[p] = true
			w.Rooms = append(w.Rooms, p)
		}
	}
	return w, nil
}

func main() {
	from := flag.String("from", "gateway/httpapi.(*Server).ServeHTTP", "the `function` (module-relative) whose first call is the walk")
	verbose := flag.Bool("v", false, "print the stays in order")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: walkcount [-from FUNC] [-v] < trace.txt\n\nCounts a request's stays, rooms and returns in a dlv trace (scripts/walk.sh).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	w, err := Read(os.Stdin, *from)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d stays in %d rooms, %d returns to a room already left\n", len(w.Stays), len(w.Rooms), w.Returns())
	fmt.Printf("rooms: %s\n", strings.Join(w.Rooms, ", "))
	if *verbose {
		fmt.Println(strings.Join(w.Stays, " → "))
	}
}
