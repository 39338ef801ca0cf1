package chatapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"time"
)

// A streamed answer is a sequence of server-sent events, each one "data:"
// line holding a chat.completion.chunk, and a last event "[DONE]". An
// answer cut short ends without [DONE] (after an error event, when the
// server can still say why), so no client mistakes it for a whole one.

// DoneData is the data of the event that ends a complete stream.
var DoneData = []byte("[DONE]")

// EventStream writes one streamed answer to an HTTP client: the response
// headers with the first event, then each event flushed as it is written.
type EventStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // bounds each write; 0: no bound
	started bool
	buf     []byte
}

// NewEventStream starts nothing yet: the headers go out with the first
// event, so a request that fails before it can still get a status and a
// JSON error instead. timeout bounds each write, so a client that stops
// reading cannot hold the handler; 0 means no bound.
func NewEventStream(w http.ResponseWriter, timeout time.Duration) *EventStream {
	return &EventStream{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// Started reports whether the headers and at least one event went out.
func (s *EventStream) Started() bool { return s.started }

// Send writes one event carrying data and flushes it.
func (s *EventStream) Send(data []byte) error {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // a buffering proxy would hold the tokens back
		s.w.WriteHeader(http.StatusOK)
	}
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	s.buf = AppendEvent(s.buf[:0], data)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// Done ends a complete stream with [DONE].
func (s *EventStream) Done() error { return s.Send(DoneData) }

// AppendEvent appends one server-sent event carrying data to dst: a
// "data:" line for each line of data (an upstream may split one JSON value
// over several, and ReadEvents joins them with newlines), then the blank
// line that ends the event.
func AppendEvent(dst, data []byte) []byte {
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			return append(dst, '\n')
		}
		data = rest
	}
}

// MaxEventBytes bounds one event read by ReadEvents.
const MaxEventBytes = 4 << 20

// Events is ReadEvents as an iterator: each event's data in turn (valid
// until the next one: clone what you keep), then, if reading failed, a
// last (nil, err). Breaking out of the loop stops reading. The one event
// reader for the gateway, its tools and their tests.
func Events(r io.Reader) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		stopped := false
		err := ReadEvents(r, func(d []byte) error {
			if !yield(d, nil) {
				stopped = true
				return errStopped
			}
			return nil
		})
		if err != nil && !stopped {
			yield(nil, err)
		}
	}
}

// errStopped ends ReadEvents when an Events loop breaks.
var errStopped = errors.New("chatapi: events: the loop stopped")

// ReadEvents reads server-sent events from r and calls fn with each
// event's data (its data lines joined by newlines). Comments, event names
// and ids are skipped. It returns fn's first error, the read error, or nil
// at the end of r.
func ReadEvents(r io.Reader, fn func(data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxEventBytes)
	var data []byte
	have := false
	dispatch := func() error {
		if !have {
			return nil
		}
		err := fn(data)
		data, have = data[:0], false
		return err
	}
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if err := dispatch(); err != nil {
				return err
			}
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // a comment, an event name, an id
		}
		v, _ = bytes.CutPrefix(v, []byte(" "))
		if have {
			data = append(data, '\n')
		}
		data, have = append(data, v...), true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("chatapi: reading the stream: %w", err)
	}
	return dispatch()
}
