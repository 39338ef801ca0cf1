package export

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerSrc is a reference file: Refill is the answer a template must not
// hold, in any form.
const answerSrc = `package bucket

// Refill tops the bucket up for the time elapsed.
func (b *Bucket) Refill(now int64) {
	elapsed := now - b.last // never negative: the clock is read under the lock
	if elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+float64(elapsed)*b.rate)
		b.last = now
	}
}

func (b *Bucket) Burst() float64 { return b.burst }
`

func answerNeedles(t *testing.T) []Needle {
	t.Helper()
	needles, err := goPieces("solutions/02-x/bucket.go", []byte(answerSrc), false)
	require.NoError(t, err)
	var kept []Needle
	for _, n := range needles {
		if n.Len() >= minNeedle {
			kept = append(kept, n)
		}
	}
	require.Len(t, kept, 1, "Refill's body is an answer; Burst's one-line body is too short to be anyone's")
	return kept
}

// refillBody is Refill's body as a learner would paste it: reformatted
// and with other comments.
const refillBody = "{\n  elapsed := now - b.last\n  if elapsed > 0 { // top up\n    b.tokens = min(b.burst, b.tokens + float64(elapsed) * b.rate)\n    b.last = now\n  }\n}"

func TestFindLeaksSeesAnAnswerInAnyFormItTakes(t *testing.T) {
	t.Parallel()
	gz := func(b []byte) []byte { return compressed(t, gzip.NewWriter, b) }
	zl := func(b []byte) []byte { return compressed(t, zlibWriter, b) }
	tarOf := func(name string, b []byte) []byte {
		var buf bytes.Buffer
		w := tar.NewWriter(&buf)
		require.NoError(t, w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, _ = w.Write(b)
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	zipOf := func(name string, b []byte) []byte {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		f, err := w.Create(name)
		require.NoError(t, err)
		_, _ = f.Write(b)
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	body := []byte(refillBody)
	jsonStr, err := json.Marshal(refillBody)
	require.NoError(t, err)
	forms := map[string][]byte{
		"plain.md":        []byte("Here it is:\n\n```go\nfunc (b *Bucket) Refill(now int64) " + refillBody + "\n```\n"),
		"commented.go":    []byte("package x\n\n/*\n" + refillBody + "\n*/\n"),
		"slashed.go":      []byte("package x\n\n// " + strings.ReplaceAll(refillBody, "\n", "\n// ") + "\n"),
		"kit.tar.gz":      gz(tarOf("02-x/ref/bucket.go", body)),
		"inner.zip":       zipOf("a/b.go", gz(body)),
		"blob.zlib":       zl(body),
		"b64.txt":         []byte("data: " + base64.StdEncoding.EncodeToString(body) + "\n"),
		"b64url.txt":      []byte(base64.RawURLEncoding.EncodeToString(gz(body))),
		"hex.txt":         []byte(hex.EncodeToString(body)),
		"literal.go":      []byte("package x\n\nconst s = " + strconv.Quote(refillBody) + "\n"),
		"split.go":        []byte("package x\n\nvar s = " + strconv.Quote(refillBody[:40]) + " +\n\t" + strconv.Quote(refillBody[40:]) + "\n"),
		"escaped.go":      []byte("package x\n\nconst s = \"" + escapeAll(refillBody) + "\"\n"),
		"doc.json":        append(append([]byte(`{"answer": `), jsonStr...), '}'),
		"page.html":       []byte("<pre>" + html.EscapeString(refillBody) + "</pre>"),
		"nested.tar.gz":   gz(tarOf("x.txt", []byte(base64.StdEncoding.EncodeToString(gz(body))))),
		"lua-comments.md": []byte("-- a note\n" + refillBody + "\n"),
		"wrapped.md":      []byte("```\n" + wrap(base64.StdEncoding.EncodeToString(body), 76) + "\n```\n"),
		"wrapped-gz.txt":  []byte(wrap(base64.StdEncoding.EncodeToString(gz(body)), 64)),
		"xxd.txt":         []byte(wrap(hex.EncodeToString(body), 60)),
		"spaced-hex.txt":  []byte(spacedHex(body, " ", "")),
		"bytes.go":        []byte("package x\n\nvar b = []byte{" + spacedHex(body, ", ", "0x") + "}\n"),
		"no-braces.md":    []byte("The statements:\n\n" + strings.TrimSuffix(strings.TrimPrefix(refillBody, "{"), "}") + "\n"),
		"block.go":        []byte("package x\n\n/*\nfunc (b *Bucket) Refill(now int64) {\n\t// a comment of its own\n\telapsed := now - b.last // and another\n\tif elapsed > 0 {\n\t\tb.tokens = min(b.burst, b.tokens+float64(elapsed)*b.rate)\n\t\tb.last = now\n\t}\n}\n*/\n"),
		"image.png":       append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01\x02\x03zTXtanswer\x00\x00"), zl(body)...),
	}
	dir := t.TempDir()
	for name, b := range forms {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "innocent.md"), []byte("The bucket refills for the time elapsed, never above its burst.\n"), 0o644))
	leaks, err := FindLeaks(dir, answerNeedles(t))
	require.NoError(t, err)
	found := map[string]string{}
	for _, l := range leaks {
		file, _, _ := strings.Cut(l.File, " → ")
		found[file] = l.String()
		assert.Equal(t, "solutions/02-x/bucket.go: the body of Bucket.Refill", l.What)
	}
	for name := range forms {
		assert.Contains(t, found, name, "the answer in %s is found", name)
	}
	assert.NotContains(t, found, "innocent.md", "the idea in words is not the answer")
	assert.Contains(t, found["kit.tar.gz"], "kit.tar.gz → gzip → 02-x/ref/bucket.go", "a leak says how it was reached")
}

// compressed is b through a compressing writer.
func compressed[W io.WriteCloser](t *testing.T, newWriter func(io.Writer) W, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := newWriter(&buf)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func zlibWriter(w io.Writer) *zlib.Writer { return zlib.NewWriter(w) }

func wrap(s string, width int) string {
	var lines []string
	for len(s) > width {
		lines = append(lines, s[:width])
		s = s[width:]
	}
	return strings.Join(append(lines, s), "\n")
}

func spacedHex(b []byte, sep, prefix string) string {
	var parts []string
	for _, c := range b {
		parts = append(parts, prefix+hex.EncodeToString([]byte{c}))
	}
	return strings.Join(parts, sep)
}

// TestFindLeaksRefusesToVouchForWhatItCannotOpen: a stream that inflates
// past the limit, or an answer nested deeper than the search goes, is a
// finding, not a silence.
func TestFindLeaksRefusesToVouchForWhatItCannotOpen(t *testing.T) {
	t.Parallel()
	gz := func(b []byte) []byte { return compressed(t, gzip.NewWriter, b) }
	dir := t.TempDir()
	big := append([]byte(refillBody), bytes.Repeat([]byte(" "), maxLeakBytes+1)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "blob.gz"), gz(big), 0o644))
	deep := []byte(refillBody)
	for range maxLeakDepth + 2 {
		deep = []byte(base64.StdEncoding.EncodeToString(gz(deep)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "deep.txt"), deep, 0o644))
	leaks, err := FindLeaks(dir, answerNeedles(t))
	require.NoError(t, err)
	var got []string
	for _, l := range leaks {
		got = append(got, l.String())
	}
	all := strings.Join(got, "\n")
	assert.Contains(t, all, "blob.gz → gzip: holds a gzip stream that inflates past 64 MiB", "too large to open is a finding")
	assert.Contains(t, all, "deep.txt → base64 → gzip → base64 → gzip", "too deep to open is a finding")
	assert.Contains(t, all, "nested deeper than")
}

func escapeAll(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		b.WriteString(`\x` + hex.EncodeToString([]byte{c}))
	}
	return b.String()
}

func TestFindLeaksWantsTheWholeAnswer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Two thirds of the body, and the body with one token changed: near
	// solutions, not the answer.
	near := strings.Replace(refillBody, "b.last = now", "b.last = b.last", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hint.md"), []byte(refillBody[:len(refillBody)*2/3]+"\n\n"+near), 0o644))
	leaks, err := FindLeaks(dir, answerNeedles(t))
	require.NoError(t, err)
	assert.Empty(t, leaks)
}

func TestMutantNeedlesAreTheHunkAsWrittenAndAsTheCodeItLeaves(t *testing.T) {
	t.Parallel()
	patch := "# Lesson: every number counts. Sum skips the first element.\n\n--- a/add.go\n+++ b/add.go\n@@ -8,7 +8,7 @@\n // Sum returns the sum of xs.\n func Sum(xs ...int) int {\n \ttotal := 0\n-\tfor _, x := range xs {\n+\tfor _, x := range xs[1:] {\n \t\ttotal = Add(total, x)\n \t}\n \treturn total\n"
	ns := mutantNeedles("m.patch", patch)
	require.Len(t, ns, 2)
	assert.True(t, containsTokens(ns[0].tokens, tokenize("-\tfor _, x := range xs {\n+\tfor _, x := range xs[1:] {")), "as written: markers and both sides")
	assert.Equal(t, tokenize("func Sum(xs ...int) int {\n\ttotal := 0\n\tfor _, x := range xs[1:] {\n\t\ttotal = Add(total, x)\n\t}\n\treturn total"), ns[1].tokens, "as the code it leaves: context and added lines, no comment")
}
