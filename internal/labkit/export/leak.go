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
	"errors"
	"fmt"
	"go/scanner"
	"go/token"
	"hash/fnv"
	"html"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A template must hold no answer in any form (docs/instructor-guide.md,
// "What each template holds"). An answer is a Needle: the code of a
// reference function, a reference script, a mutant's change, an exercise
// test. FindLeaks looks for needles in every file of a directory, and in
// what those files hold: archives unpacked (tar, gzip, zlib, zip) and
// encodings undone (base64, hex, Go and JSON string literals, HTML
// entities), to a bounded depth.
//
// Matching is by tokens, not bytes: identifiers and numbers are tokens,
// every other visible character is one, whitespace separates, and
// comments are dropped on both sides, so a reformatted or re-commented
// copy still matches. A needle matches only whole, and only needles of at
// least minNeedle tokens are kept: "return nil" is nobody's answer.

// minNeedle is the fewest tokens a needle has: a body shorter than
// this is too common to be anyone's answer.
const minNeedle = 10

// leakLimits bound the unpacking: how deep encodings and archives nest,
// and how much one file may inflate to.
const (
	maxLeakDepth = 4
	maxLeakBytes = 64 << 20
)

// Needle is one answer that must not appear in a template.
type Needle struct {
	What   string // where it comes from: "solutions/07-distlimit/limiter.go: Allow"
	tokens []string
}

// Len is the needle's length in tokens.
func (n Needle) Len() int { return len(n.tokens) }

// Leak is one needle found in a template.
type Leak struct {
	// File is the template file, relative and slash-separated, followed by
	// what was unpacked or decoded to reach the text: "write/kit.tar.gz
	// → 07-distlimit/ref/limiter.go", "docs/x.md → base64".
	File string
	What string // the needle's What
}

func (l Leak) String() string { return l.File + ": holds " + l.What }

// ErrAnswerInTemplate is wrapped when an export finds an answer in the
// template it wrote.
var ErrAnswerInTemplate = errors.New("the template holds an answer")

// FindLeaks reads every regular file under dir and returns each needle
// found, once per file it is found in, sorted by file.
func FindLeaks(dir string, needles []Needle) ([]Leak, error) {
	idx := newNeedleIndex(needles)
	var leaks []Leak
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		found := map[string]string{} // needle → the first place it was found
		idx.search(rel, data, 0, found)
		for what, where := range found {
			leaks = append(leaks, Leak{File: where, What: what})
		}
		return nil
	})
	slices.SortFunc(leaks, func(a, b Leak) int { return strings.Compare(a.File+a.What, b.File+b.What) })
	return leaks, err
}

// needleIndex finds needles by their first few tokens.
type needleIndex struct {
	byHead map[uint64][]Needle
}

// headLen is how many tokens key the index: every needle has at least
// minNeedle, so at least this many.
const headLen = 6

func newNeedleIndex(needles []Needle) *needleIndex {
	idx := &needleIndex{byHead: map[uint64][]Needle{}}
	for _, n := range needles {
		if len(n.tokens) < headLen {
			continue
		}
		h := hashTokens(n.tokens[:headLen])
		idx.byHead[h] = append(idx.byHead[h], n)
	}
	return idx
}

func hashTokens(toks []string) uint64 {
	h := fnv.New64a()
	for _, t := range toks {
		h.Write([]byte(t))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// search looks for needles in data, reached through where, and in
// everything data holds. What it cannot open — a stream that inflates
// past maxLeakBytes, an archive or an encoding nested deeper than
// maxLeakDepth — is a finding too: the search cannot vouch for it.
func (idx *needleIndex) search(where string, data []byte, depth int, found map[string]string) {
	if len(data) == 0 {
		return
	}
	var inner []blob
	inner = append(inner, unpack(data)...)
	text := ""
	if looksLikeText(data) {
		text = string(data)
		variants := []string{
			text,
			stripComments(text, "//", "/*", "*/"),
			stripComments(text, "--", "--[[", "]]"),
			stripComments(uncomment(text), "//", "/*", "*/"),                                     // code commented out line by line
			stripComments(strings.NewReplacer("/*", " ", "*/", " ").Replace(text), "//", "", ""), // code in a block comment, with comments of its own
		}
		for _, variant := range variants {
			idx.match(where, tokenize(variant), found)
		}
		inner = append(inner, decodings(text)...)
	}
	for _, b := range inner {
		switch {
		case b.tooLarge:
			found[fmt.Sprintf("a %s stream that inflates past %d MiB, which the search does not open", b.name, maxLeakBytes>>20)] = where + " → " + b.name
		case depth >= maxLeakDepth:
			if meaningful(b.data) {
				found[fmt.Sprintf("something nested deeper than %d levels, which the search does not open", maxLeakDepth)] = where + " → " + b.name
			}
		default:
			idx.search(where+" → "+b.name, b.data, depth+1, found)
		}
	}
}

// meaningful reports whether a decoding or a member holds something worth
// searching: an archive, or text.
func meaningful(data []byte) bool {
	if len(unpack(data)) > 0 {
		return true
	}
	return len(data) >= 16 && utf8.Valid(data) && looksLikeText(data)
}

func (idx *needleIndex) match(where string, toks []string, found map[string]string) {
	for i := 0; i+headLen <= len(toks); i++ {
		cands := idx.byHead[hashTokens(toks[i:i+headLen])]
		for _, n := range cands {
			if _, done := found[n.What]; done {
				continue
			}
			if i+len(n.tokens) <= len(toks) && slices.Equal(toks[i:i+len(n.tokens)], n.tokens) {
				found[n.What] = where
			}
		}
	}
}

// tokenize splits text into tokens: runs of letters, digits and '_', and
// every other character that is not a space, one token each.
func tokenize(text string) []string {
	var toks []string
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case isWordRune(r):
			j := i + size
			for j < len(text) {
				r2, s2 := utf8.DecodeRuneInString(text[j:])
				if !isWordRune(r2) {
					break
				}
				j += s2
			}
			toks = append(toks, text[i:j])
			i = j
		default:
			toks = append(toks, text[i:i+size])
			i += size
		}
	}
	return toks
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// stripComments removes line comments (from line to the end of the line)
// and block comments (open … close) from text, whatever the text is: in
// prose it may cut more than a comment, which only hides text from the
// other variants' view, never adds a match that is not there.
func stripComments(text, line, open, close string) string {
	var b strings.Builder
	for i := 0; i < len(text); {
		switch {
		case open != "" && strings.HasPrefix(text[i:], open):
			end := strings.Index(text[i+len(open):], close)
			if end < 0 {
				// An opening with no close is not a comment worth
				// dropping the rest of the file for.
				b.WriteString(open)
				i += len(open)
				continue
			}
			b.WriteByte(' ')
			i += len(open) + end + len(close)
		case strings.HasPrefix(text[i:], line):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				return b.String()
			}
			i += end
		default:
			b.WriteByte(text[i])
			i++
		}
	}
	return b.String()
}

// uncomment is text with code that was commented out line by line brought
// back: each line's leading "//" removed. What is left of the comments
// inside that code the caller strips.
func uncomment(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		trimmed := strings.TrimLeft(line, " \t")
		if rest, ok := strings.CutPrefix(trimmed, "//"); ok {
			line = rest
		}
		b.WriteString(line)
	}
	return b.String()
}

// codeTokens tokenizes Go source without its comments: what a needle is
// made of when it comes from Go code.
func codeTokens(src []byte) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	f := fset.AddFile("", fset.Base(), len(src))
	s.Init(f, src, nil, 0) // comments are skipped without ScanComments
	var toks []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return toks
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // an inserted semicolon is not in the text
		}
		if lit == "" {
			lit = tok.String()
		}
		toks = append(toks, tokenize(lit)...)
	}
}

// luaTokens tokenizes a Lua script without its comments.
func luaTokens(src []byte) []string {
	return tokenize(stripComments(string(src), "--", "--[[", "]]"))
}

// looksLikeText reports whether data is worth tokenizing: valid UTF-8
// with few control characters.
func looksLikeText(data []byte) bool {
	sample := data[:min(len(data), 4096)]
	if !utf8.Valid(sample[:max(0, len(sample)-3)]) {
		return false
	}
	ctl := 0
	for _, c := range sample {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			ctl++
		}
	}
	return ctl*100 <= len(sample)
}

// blob is something found inside a file: an archive member or a decoding.
type blob struct {
	name     string
	data     []byte
	tooLarge bool // it inflates past maxLeakBytes
}

// unpack returns what an archive or a compressed stream holds, or nothing.
// Binary data is also searched for gzip and zlib streams that do not start
// it (inside another format, after a header of the author's own).
func unpack(data []byte) []blob {
	var out []blob
	switch {
	case bytes.HasPrefix(data, []byte("PK\x03\x04")):
		return unzip(data)
	case len(data) > 262 && string(data[257:262]) == "ustar":
		return untar(data)
	}
	// Text holds its streams encoded, which decodings finds: only a
	// stream that starts it is looked for there.
	last := len(data) - 3
	if looksLikeText(data) {
		last = 0
	}
	starts := 0
	for off := 0; off <= last && starts < maxStreamStarts; off++ {
		var r io.Reader
		var name string
		switch {
		case data[off] == 0x1f && data[off+1] == 0x8b && data[off+2] == 8:
			zr, err := gzip.NewReader(bytes.NewReader(data[off:]))
			if err != nil {
				continue
			}
			zr.Multistream(false)
			r, name = zr, "gzip"
		case data[off] == 0x78 && (data[off+1] == 0x01 || data[off+1] == 0x5e || data[off+1] == 0x9c || data[off+1] == 0xda):
			zr, err := zlib.NewReader(bytes.NewReader(data[off:]))
			if err != nil {
				continue
			}
			r, name = zr, "zlib"
		default:
			continue
		}
		starts++
		if off > 0 {
			name += fmt.Sprintf(" at byte %d", off)
		}
		b, err := readBounded(r)
		switch {
		case errors.Is(err, errTooLarge):
			out = append(out, blob{name: name, tooLarge: true})
		case len(b) > 0:
			// A stream cut short still gives what it held up to the cut.
			out = append(out, blob{name: name, data: b})
		}
		if off == 0 && err == nil {
			return out // the whole file is one stream
		}
	}
	return out
}

// maxStreamStarts bounds how many compressed-stream headers one file is
// tried at.
const maxStreamStarts = 64

var errTooLarge = errors.New("inflates past the search's limit")

func readBounded(r io.Reader) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, maxLeakBytes+1))
	if len(out) > maxLeakBytes {
		return nil, errTooLarge
	}
	return out, err
}

func untar(data []byte) []blob {
	var out []blob
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err != nil {
			return out
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := readBounded(tr)
		if errors.Is(err, errTooLarge) {
			out = append(out, blob{name: hdr.Name, tooLarge: true})
			continue
		}
		if err != nil {
			return out
		}
		out = append(out, blob{name: hdr.Name, data: b})
	}
}

func unzip(data []byte) []blob {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil
	}
	var out []blob
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			continue
		}
		b, err := readBounded(rc)
		rc.Close()
		switch {
		case errors.Is(err, errTooLarge):
			out = append(out, blob{name: f.Name, tooLarge: true})
		case err == nil:
			out = append(out, blob{name: f.Name, data: b})
		}
	}
	return out
}

var (
	base64Run  = regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`)
	hexRun     = regexp.MustCompile(`(?:(?:0[xX])?[0-9a-fA-F]{2}[\s,]*){32,}`) // "6675…", "66 75 …", "0x66, 0x75, …", xxd -p's lines
	hexNoise   = strings.NewReplacer("0x", "", "0X", "", ",", "", " ", "", "\t", "", "\n", "", "\r", "")
	base64Line = regexp.MustCompile(`^[A-Za-z0-9+/=_-]{16,}$`)
	quotedRun  = regexp.MustCompile(`"(?:[^"\\\n]|\\.)*\\(?:[^"\\\n]|\\.)*"`) // a double-quoted string with an escape in it
	rawQuoted  = regexp.MustCompile("`[^`]{40,}`")
	entityLike = regexp.MustCompile(`&(#[0-9]+|#x[0-9a-fA-F]+|[a-z]+);`)
)

// decodings returns what text's encoded runs decode to: base64 (standard
// or URL alphabet, padded or not), hex, Go or JSON string literals with
// escapes, and the text with its HTML entities undone.
func decodings(text string) []blob {
	var out []blob
	for _, run := range append(base64Run.FindAllString(text, -1), wrappedBase64(text)...) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(run); err == nil && len(b) > 0 {
				out = append(out, blob{name: "base64", data: b})
				break
			}
		}
	}
	for _, run := range hexRun.FindAllString(text, -1) {
		digits := hexNoise.Replace(run)
		if b, err := hex.DecodeString(digits[:len(digits)&^1]); err == nil {
			out = append(out, blob{name: "hex", data: b})
		}
	}
	var lits []string
	for _, q := range quotedRun.FindAllString(text, -1) {
		if s, err := strconv.Unquote(q); err == nil {
			lits = append(lits, s)
		} else if json.Unmarshal([]byte(q), &s) == nil {
			lits = append(lits, s)
		}
	}
	if len(lits) > 0 {
		// One blob of every literal, in order: a body split over several
		// concatenated literals still reads whole.
		out = append(out, blob{name: "string literals", data: []byte(strings.Join(lits, "\n"))})
	}
	for _, q := range rawQuoted.FindAllString(text, -1) {
		if strings.Contains(q, "\\") {
			if s, err := strconv.Unquote(`"` + strings.ReplaceAll(q[1:len(q)-1], `"`, `\"`) + `"`); err == nil {
				out = append(out, blob{name: "escapes", data: []byte(s)})
			}
		}
	}
	if entityLike.MatchString(text) {
		if u := html.UnescapeString(text); u != text {
			out = append(out, blob{name: "HTML entities", data: []byte(u)})
		}
	}
	return out
}

// wrappedBase64 joins base64 that a tool wrapped into lines (base64 and
// openssl write 76 or 64 columns): each run of two or more lines that hold
// nothing but base64, indentation aside, as one string.
func wrappedBase64(text string) []string {
	var runs []string
	var cur []string
	flush := func() {
		if len(cur) >= 2 {
			runs = append(runs, strings.Join(cur, ""))
		}
		cur = nil
	}
	for line := range strings.Lines(text) {
		t := strings.TrimSpace(line)
		if base64Line.MatchString(t) {
			cur = append(cur, t)
			continue
		}
		flush()
	}
	flush()
	return runs
}

// describeLeaks is the error an export returns when it finds answers.
func describeLeaks(dir string, leaks []Leak) error {
	const show = 20
	var b strings.Builder
	for i, l := range leaks {
		if i == show {
			fmt.Fprintf(&b, "\n  … and %d more", len(leaks)-show)
			break
		}
		fmt.Fprintf(&b, "\n  %s", l)
	}
	return fmt.Errorf("%w: %d found in %s (the template is left there to look at; do not publish it):%s", ErrAnswerInTemplate, len(leaks), dir, b.String())
}
