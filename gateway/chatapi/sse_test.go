package chatapi

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventStreamWritesWhatReadEventsReads(t *testing.T) {
	rec := httptest.NewRecorder()
	s := NewEventStream(rec, time.Second)
	assert.False(t, s.Started(), "nothing goes out before the first event")
	events := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":"x y"}`)}
	for _, e := range events {
		require.NoError(t, s.Send(e))
	}
	require.NoError(t, s.Done())
	assert.True(t, s.Started())
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	assert.Equal(t, "no", rec.Header().Get("X-Accel-Buffering"), "a buffering proxy would hold the tokens back")
	assert.True(t, rec.Flushed, "each event is flushed as it is written")
	assert.Equal(t, "data: {\"a\":1}\n\ndata: {\"b\":\"x y\"}\n\ndata: [DONE]\n\n", rec.Body.String())

	var got [][]byte
	require.NoError(t, ReadEvents(rec.Body, func(d []byte) error { got = append(got, bytes.Clone(d)); return nil }))
	assert.Equal(t, append(events, DoneData), got)
}

func TestReadEventsSkipsCommentsAndJoinsDataLines(t *testing.T) {
	in := ": keep-alive\n\nevent: x\nid: 7\ndata: one\ndata:two\n\ndata: last"
	var got []string
	require.NoError(t, ReadEvents(bytes.NewReader([]byte(in)), func(d []byte) error { got = append(got, string(d)); return nil }))
	assert.Equal(t, []string{"one\ntwo", "last"}, got, "a data line's one optional space is dropped; an event at EOF counts")
}

func TestAnEventOfSeveralLinesRoundTrips(t *testing.T) {
	data := []byte("{\"a\":\n1,\n\"b\":2}")
	out := AppendEvent(nil, data)
	assert.Equal(t, "data: {\"a\":\ndata: 1,\ndata: \"b\":2}\n\n", string(out), "one data line per line: a bare line would be no field at all")
	var got [][]byte
	require.NoError(t, ReadEvents(bytes.NewReader(out), func(d []byte) error { got = append(got, bytes.Clone(d)); return nil }))
	assert.Equal(t, [][]byte{data}, got)
}

func TestReadEventsStopsAtTheFirstError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := ReadEvents(bytes.NewReader([]byte("data: 1\n\ndata: 2\n\n")), func([]byte) error { n++; return stop })
	assert.ErrorIs(t, err, stop)
	assert.Equal(t, 1, n)
}

func TestReadEventsReadsTheCorpus(t *testing.T) {
	b, err := os.ReadFile("testdata/streams/plain-with-comment.sse")
	require.NoError(t, err)
	var got []string
	require.NoError(t, ReadEvents(bytes.NewReader(b), func(d []byte) error { got = append(got, string(d)); return nil }))
	require.NotEmpty(t, got)
	assert.Equal(t, "[DONE]", got[len(got)-1])
}

func TestWriteErrorSetsItsHeadersOnce(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, &Error{Status: 429, Type: "rate_limit_error", Code: "rate_limited", Message: "slow down",
		RetryAfter: 1500 * time.Millisecond, Challenge: `Bearer realm="x"`})
	assert.Equal(t, 429, rec.Code)
	assert.Equal(t, "2", rec.Header().Get("Retry-After"), "rounded up: a client told 1 s would be refused again")
	assert.Equal(t, `Bearer realm="x"`, rec.Header().Get("WWW-Authenticate"))
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limited"}}`, rec.Body.String())
	assert.Equal(t, rec.Header().Get("Content-Length"), strconv.Itoa(rec.Body.Len()))

	plain := httptest.NewRecorder()
	WriteError(plain, &Error{Status: 400, Type: "invalid_request_error", Message: "no"})
	assert.Empty(t, plain.Header().Get("Retry-After"), "no wait, no header")
	assert.Empty(t, plain.Header().Get("WWW-Authenticate"))
}

func TestRetryAfterSecondsRoundsUpToAtLeastOne(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 30 * time.Second: "30"} {
		t.Run(d.String(), func(t *testing.T) {
			assert.Equal(t, want, RetryAfterSeconds(d), "%v", d)
		})
	}
}

func TestEventsIteratesWhatReadEventsReadsAndStopsWhenTold(t *testing.T) {
	in := "data: 1\n\n: a comment\ndata: 2\ndata: 3\n\ndata: [DONE]\n\n"
	var got []string
	for d, err := range Events(strings.NewReader(in)) {
		require.NoError(t, err)
		got = append(got, string(d))
	}
	assert.Equal(t, []string{"1", "2\n3", "[DONE]"}, got)

	got = nil
	for d := range Events(strings.NewReader(in)) {
		got = append(got, string(d))
		break
	}
	assert.Equal(t, []string{"1"}, got, "a loop that breaks stops reading")

	var last error
	for _, err := range Events(iotest.ErrReader(errors.New("reset"))) {
		last = err
	}
	assert.ErrorContains(t, last, "reset", "a read error comes last")
}
