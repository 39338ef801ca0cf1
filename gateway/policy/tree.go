package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The loader first turns JSON or YAML into a tree of nodes that remember
// where they were written, then validates that tree (validate.go). Decoding
// straight into a struct would lose the positions, and with them the
// "FILE:LINE:COL" of every error.

type kind int

const (
	kMap kind = iota
	kSeq
	kStr
	kInt
	kFloat
	kBool
	kNull
	kOther // a YAML tag we do not know, such as !!binary or !custom
)

func (k kind) String() string {
	return [...]string{"a mapping", "a list", "a string", "a whole number", "a number", "a boolean", "null", "a tagged value"}[k]
}

type node struct {
	kind      kind
	line, col int
	text      string  // a scalar as written (kStr: its value)
	i         int64   // kInt
	f         float64 // kInt and kFloat
	rangeErr  bool    // kInt: does not fit in 64 bits
	keys      []*node // kMap, in file order
	vals      []*node // kMap, vals[i] belongs to keys[i]
	items     []*node // kSeq
}

// maxDepth bounds nesting while building the tree: a policy is four levels
// deep, so anything much deeper is not a policy, and unbounded recursion on
// "[[[[…" must not be the price of finding that out.
const maxDepth = 32

// maxNodes bounds the tree (a three-tier policy is about 40 nodes; this
// leaves room for hundreds of tiers): YAML aliases can expand a small file
// exponentially ("billion laughs").
const maxNodes = 10_000

var errTooDeep = fmt.Errorf("nested deeper than %d levels", maxDepth)

// ---- JSON ------------------------------------------------------------------

type jsonParser struct {
	data  []byte
	dec   *json.Decoder
	nodes int
}

func parseJSON(data []byte) (*node, *Error) {
	p := &jsonParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	if p.skip() == len(data) {
		return nil, nil // empty: the validator says what is missing
	}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if start := p.skip(); start < len(data) {
		return nil, p.errAt(start, "unexpected data after the top-level value")
	}
	return root, nil
}

// skip returns the offset where the next token starts: the decoder's offset
// is the end of the previous token, before any space, ':' or ','.
func (p *jsonParser) skip() int {
	off := int(p.dec.InputOffset())
	for off < len(p.data) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
			continue
		}
		break
	}
	return off
}

func (p *jsonParser) errAt(off int, msg string) *Error {
	line, col := lineCol(p.data, off)
	return &Error{Line: line, Col: col, Msg: msg}
}

// syntaxErr places a decoder error: a *json.SyntaxError carries the offset
// of the offending byte; anything else (a truncated file) is at the end.
func (p *jsonParser) syntaxErr(err error) *Error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return p.errAt(int(se.Offset), "JSON: "+se.Error())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return p.errAt(len(p.data), "JSON: unexpected end of file")
	}
	return p.errAt(p.skip(), "JSON: "+err.Error())
}

func (p *jsonParser) value(depth int) (*node, *Error) {
	start := p.skip()
	if depth > maxDepth {
		return nil, p.errAt(start, errTooDeep.Error())
	}
	if p.nodes++; p.nodes > maxNodes {
		return nil, p.errAt(start, fmt.Sprintf("more than %d values", maxNodes))
	}
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntaxErr(err)
	}
	line, col := lineCol(p.data, start)
	n := &node{line: line, col: col}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = kMap
			for p.dec.More() {
				kstart := p.skip()
				ktok, err := p.dec.Token()
				if err != nil {
					return nil, p.syntaxErr(err)
				}
				key, ok := ktok.(string)
				if !ok { // the decoder refuses non-string keys itself; be safe
					return nil, p.errAt(kstart, "JSON: object keys must be strings")
				}
				kl, kc := lineCol(p.data, kstart)
				v, perr := p.value(depth + 1)
				if perr != nil {
					return nil, perr
				}
				n.keys = append(n.keys, &node{kind: kStr, line: kl, col: kc, text: key})
				n.vals = append(n.vals, v)
			}
		case '[':
			n.kind = kSeq
			for p.dec.More() {
				v, perr := p.value(depth + 1)
				if perr != nil {
					return nil, perr
				}
				n.items = append(n.items, v)
			}
		default:
			return nil, p.errAt(start, fmt.Sprintf("JSON: unexpected %q", rune(t)))
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, p.syntaxErr(err)
		}
	case string:
		n.kind, n.text = kStr, t
	case json.Number:
		n.text = t.String()
		if strings.ContainsAny(n.text, ".eE") {
			n.kind = kFloat
			n.f, _ = strconv.ParseFloat(n.text, 64) // ±Inf when out of range
		} else {
			n.kind = kInt
			var err error
			if n.i, err = strconv.ParseInt(n.text, 10, 64); err != nil {
				n.rangeErr = true
			}
			n.f = float64(n.i)
		}
	case bool:
		n.kind, n.text = kBool, strconv.FormatBool(t)
	case nil:
		n.kind, n.text = kNull, "null"
	}
	return n, nil
}

// lineCol turns a byte offset into a 1-based line and a 1-based column
// counted in characters, as YAML's positions are.
func lineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	lineStart := bytes.LastIndexByte(data[:off], '\n') + 1
	return line, 1 + utf8.RuneCount(data[lineStart:off])
}

// ---- YAML ------------------------------------------------------------------

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parseYAML(data []byte) (*node, *Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty: the validator says what is missing
		}
		return nil, yamlErr(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlErr(err)
	default:
		return nil, &Error{Line: next.Line, Col: next.Column, Msg: "a policy file holds one YAML document; found a second"}
	}
	b := &yamlBuilder{}
	return b.build(&doc, 0)
}

// yamlParserProblems are the errors of yaml.v3's parser stage (parserc.go),
// as opposed to its scanner stage. yaml.v3 v3.0.5 reports the line of a
// scanner error 1-based but that of a parser error 0-based (its fail()
// adds one for scanner errors only), so a parser error's line needs one
// more. TestParseReportsEachErrorWithFileLineColumnAndPath pins both kinds,
// so an upgrade that fixes this shows up as a failing test.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// yamlErr places a YAML syntax error: the parser gives a line at best (the
// line where the broken construct starts), never a column. Line 0 means
// it gave none.
func yamlErr(err error) *Error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		if yamlParserProblems[m[2]] {
			line++
		}
		return &Error{Line: line, Msg: "YAML: " + m[2]}
	}
	return &Error{Msg: strings.Replace(err.Error(), "yaml: ", "YAML: ", 1)}
}

type yamlBuilder struct{ nodes int }

func (b *yamlBuilder) build(y *yaml.Node, depth int) (*node, *Error) {
	if depth > maxDepth {
		return nil, &Error{Line: y.Line, Col: y.Column, Msg: errTooDeep.Error()}
	}
	if b.nodes++; b.nodes > maxNodes {
		return nil, &Error{Line: y.Line, Col: y.Column, Msg: fmt.Sprintf("more than %d values (after expanding aliases)", maxNodes)}
	}
	n := &node{line: y.Line, col: y.Column}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil, nil
		}
		return b.build(y.Content[0], depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &Error{Line: y.Line, Col: y.Column, Msg: "YAML: unknown alias"}
		}
		target, err := b.build(y.Alias, depth+1)
		if err != nil {
			return nil, err
		}
		// The value is the anchor's; the position is the alias's, where
		// the value is used.
		target.line, target.col = y.Line, y.Column
		return target, nil
	case yaml.MappingNode:
		n.kind = kMap
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, err := b.build(y.Content[i], depth+1)
			if err != nil {
				return nil, err
			}
			v, err := b.build(y.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k)
			n.vals = append(n.vals, v)
		}
	case yaml.SequenceNode:
		n.kind = kSeq
		for _, c := range y.Content {
			v, err := b.build(c, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
	case yaml.ScalarNode:
		n.text = y.Value
		switch y.ShortTag() {
		case "!!str":
			n.kind = kStr
		case "!!int":
			n.kind = kInt
			if err := y.Decode(&n.i); err != nil {
				n.rangeErr = true
			}
			n.f = float64(n.i)
		case "!!float":
			n.kind = kFloat
			if err := y.Decode(&n.f); err != nil {
				n.f = math.NaN()
			}
		case "!!bool":
			n.kind = kBool
		case "!!null":
			n.kind = kNull
		default:
			n.kind = kOther
		}
	default:
		n.kind = kOther
	}
	return n, nil
}
