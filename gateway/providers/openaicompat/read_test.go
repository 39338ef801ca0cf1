package openaicompat

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endsLater is a body that gives its bytes and only on a later read says
// it has ended, as an HTTP/2 stream whose end-of-stream frame comes after
// its last data frame does. It records whether that end was read.
type endsLater struct {
	r        *strings.Reader
	endRead  bool
	extraErr error // returned instead of the end, when set
}

func (b *endsLater) Read(p []byte) (int, error) {
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	if b.extraErr != nil {
		return 0, b.extraErr
	}
	b.endRead = true
	return 0, io.EOF
}

func (b *endsLater) Close() error { return nil }

func answerOf(body string, declared int64, extraErr error) (*http.Response, *endsLater) {
	b := &endsLater{r: strings.NewReader(body), extraErr: extraErr}
	return &http.Response{ContentLength: declared, Body: b}, b
}

func TestReadAnswerReadsToTheBodysEnd(t *testing.T) {
	const answer = `{"choices":[]}`
	for _, declared := range []int64{int64(len(answer)), -1} {
		resp, body := answerOf(answer, declared, nil)
		got, err := readAnswer(resp)
		require.NoError(t, err, "declared %d", declared)
		assert.Equal(t, answer, string(got), "declared %d", declared)
		assert.True(t, body.endRead, "declared %d: the end of the body is read, so closing it cancels nothing upstream", declared)
	}

	resp, body := answerOf("", 0, nil)
	got, err := readAnswer(resp)
	require.NoError(t, err)
	assert.Empty(t, got, "an empty answer is empty (and refused later as not JSON)")
	assert.True(t, body.endRead)
}

func TestReadAnswerRefusesABodyThatDisagreesWithItsLength(t *testing.T) {
	resp, _ := answerOf(`{"a":1}`, 3, nil)
	_, err := readAnswer(resp)
	require.ErrorIs(t, err, ErrMalformed, "longer than declared")

	resp, _ = answerOf(`{"a":1}`, 20, nil)
	_, err = readAnswer(resp)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "shorter than declared")

	resp, _ = answerOf("", 20, nil)
	_, err = readAnswer(resp)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "nothing of what was declared")

	reset := errors.New("stream reset")
	resp, _ = answerOf(`{"a":1}`, 7, reset)
	_, err = readAnswer(resp)
	require.ErrorIs(t, err, reset, "an error where the end should be is the answer's error")
}
