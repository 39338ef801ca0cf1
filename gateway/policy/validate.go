package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tierFields are a tier's keys, in the order errors list them.
var tierFields = []string{
	"rate_per_second", "burst", "max_in_flight", "max_prompt_bytes",
	"models", "max_request_timeout", "tokens_per_minute",
}

// maxReported bounds the errors one Parse returns.
const maxReported = 20

// maxNameBytes bounds a tier name, as the identity package bounds the tier
// claim that must match it.
const maxNameBytes = 64

type validator struct {
	file string
	errs []*Error
}

func (v *validator) fail(n *node, path, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: n.line, Col: n.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// err returns the collected errors in file order, at most maxReported.
func (v *validator) err() error {
	slices.SortStableFunc(v.errs, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Col - b.Col
	})
	if len(v.errs) == 1 {
		return v.errs[0]
	}
	errs := make([]error, 0, maxReported+1)
	for i, e := range v.errs {
		if i == maxReported {
			errs = append(errs, fmt.Errorf("%s: and %d more errors", v.file, len(v.errs)-maxReported))
			break
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// describe names a node's kind and, for a scalar, its text: "a string "10"".
func describe(n *node) string {
	switch n.kind {
	case kMap, kSeq, kNull:
		return n.kind.String()
	}
	t := n.text
	if len(t) > 40 {
		t = t[:40] + "…"
	}
	return fmt.Sprintf("%s %s", n.kind, strconv.Quote(t))
}

// fields checks a mapping's keys: strings, no duplicates, all known. It
// returns the values by key.
func (v *validator) fields(m *node, path string, known []string, what string) map[string]*node {
	out := make(map[string]*node, len(m.keys))
	for i, k := range m.keys {
		kp := join(path, k.text)
		switch {
		case k.kind == kOther && k.text == "<<":
			v.fail(k, path, "YAML merge keys (<<) are not supported; write the fields out")
			continue
		case k.kind != kStr:
			v.fail(k, path, "keys must be strings, got %s", describe(k))
			continue
		case out[k.text] != nil:
			first := m.keys[slices.IndexFunc(m.keys, func(o *node) bool { return o.kind == kStr && o.text == k.text })]
			v.fail(k, kp, "duplicate key (first at line %d)", first.line)
			continue
		case known != nil && !slices.Contains(known, k.text):
			v.fail(k, kp, "unknown field; %s has %s", what, strings.Join(known, ", "))
			continue
		}
		out[k.text] = m.vals[i]
	}
	return out
}

func (v *validator) policy(root *node) *Policy {
	if root == nil {
		v.errs = append(v.errs, &Error{File: v.file, Line: 1, Col: 1, Path: "tiers", Msg: "required; the file is empty"})
		return nil
	}
	if root.kind != kMap {
		v.fail(root, "", "the top level must be a mapping with a \"tiers\" key, got %s", describe(root))
		return nil
	}
	top := v.fields(root, "", []string{"tiers"}, "the top level")
	tiers := top["tiers"]
	switch {
	case tiers == nil:
		if !slices.ContainsFunc(root.keys, func(k *node) bool { return k.text == "tiers" }) {
			v.fail(root, "tiers", "required")
		}
		return nil
	case tiers.kind != kMap:
		v.fail(tiers, "tiers", "must be a mapping of tier names to tiers, got %s", describe(tiers))
		return nil
	case len(tiers.keys) == 0:
		v.fail(tiers, "tiers", "must define at least one tier")
		return nil
	}
	p := &Policy{tiers: make(map[string]Tier)}
	byName := v.fields(tiers, "tiers", nil, "")
	seen := make(map[string]bool, len(byName))
	for _, k := range tiers.keys {
		val, ok := byName[k.text]
		if !ok || k.kind != kStr || seen[k.text] {
			continue // a bad or duplicate key, reported by fields
		}
		seen[k.text] = true
		path := join("tiers", k.text)
		if msg := checkName(k.text); msg != "" {
			v.fail(k, path, "%s", msg)
			continue
		}
		if t, ok := v.tier(k, val, path); ok {
			p.tiers[k.text] = t
			p.names = append(p.names, k.text)
		}
	}
	slices.Sort(p.names)
	return p
}

func checkName(s string) string {
	if s == "" {
		return "a tier name must not be empty"
	}
	if len(s) > maxNameBytes {
		return fmt.Sprintf("a tier name is at most %d bytes", maxNameBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "a tier name is visible ASCII: no spaces, control or non-ASCII characters"
		}
	}
	return ""
}

// tier validates one tier; key is its name's node, where a missing field is
// reported.
func (v *validator) tier(key, n *node, path string) (Tier, bool) {
	if n.kind != kMap {
		v.fail(n, path, "must be a mapping of limits, got %s", describe(n))
		return Tier{}, false
	}
	before := len(v.errs)
	f := v.fields(n, path, tierFields, "a tier")
	for _, name := range tierFields {
		if f[name] == nil && !slices.ContainsFunc(n.keys, func(k *node) bool { return k.text == name }) {
			v.fail(key, join(path, name), "required")
		}
	}
	t := Tier{Name: key.text}
	if x := f["rate_per_second"]; x != nil {
		t.RatePerSecond = v.positive(x, join(path, "rate_per_second"))
	}
	if x := f["burst"]; x != nil {
		t.Burst = v.atLeast(x, join(path, "burst"), 1)
	}
	if x := f["max_in_flight"]; x != nil {
		t.MaxInFlight = v.atLeast(x, join(path, "max_in_flight"), 1)
	}
	if x := f["max_prompt_bytes"]; x != nil {
		t.MaxPromptBytes = v.atLeast(x, join(path, "max_prompt_bytes"), 1)
	}
	if x := f["models"]; x != nil {
		t.Models = v.models(x, join(path, "models"))
	}
	if x := f["max_request_timeout"]; x != nil {
		t.MaxRequestTimeout = v.duration(x, join(path, "max_request_timeout"))
	}
	if x := f["tokens_per_minute"]; x != nil {
		t.TokensPerMinute = v.atLeast(x, join(path, "tokens_per_minute"), 0)
	}
	return t, len(v.errs) == before
}

func (v *validator) positive(n *node, path string) float64 {
	if n.kind != kInt && n.kind != kFloat {
		v.fail(n, path, "must be a number, got %s", describe(n))
		return 0
	}
	if math.IsNaN(n.f) || math.IsInf(n.f, 0) || n.rangeErr {
		v.fail(n, path, "must be a finite number, got %s", strconv.Quote(n.text))
		return 0
	}
	if n.f <= 0 {
		v.fail(n, path, "must be greater than 0, got %s", n.text)
		return 0
	}
	return n.f
}

func (v *validator) atLeast(n *node, path string, lo int64) int {
	switch {
	case n.kind != kInt:
		v.fail(n, path, "must be a whole number, got %s", describe(n))
		return 0
	case n.rangeErr || n.i > math.MaxInt:
		v.fail(n, path, "is out of range, got %s", n.text)
		return 0
	case n.i < lo:
		v.fail(n, path, "must be at least %d, got %s", lo, n.text)
		return 0
	}
	return int(n.i)
}

func (v *validator) models(n *node, path string) []string {
	if n.kind != kSeq {
		v.fail(n, path, `must be a list of model names (or ["*"]), got %s`, describe(n))
		return nil
	}
	if len(n.items) == 0 {
		v.fail(n, path, `must not be empty; list model names, or ["*"] for all`)
		return nil
	}
	out := make([]string, 0, len(n.items))
	for i, it := range n.items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case it.kind != kStr:
			v.fail(it, ip, "must be a model name, got %s", describe(it))
		case it.text == "" || strings.ContainsFunc(it.text, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			v.fail(it, ip, "must be a model name without spaces or control characters, got %s", strconv.Quote(it.text))
		case slices.Contains(out, it.text):
			v.fail(it, ip, "duplicate model %s", strconv.Quote(it.text))
		case it.text == AllModels && len(n.items) > 1 || it.text != AllModels && slices.Contains(out, AllModels):
			v.fail(it, ip, `"*" allows every model and must be the only entry`)
		default:
			out = append(out, it.text)
		}
	}
	return out
}

func (v *validator) duration(n *node, path string) time.Duration {
	if n.kind != kStr {
		v.fail(n, path, `must be a duration string like "30s", got %s`, describe(n))
		return 0
	}
	d, err := time.ParseDuration(n.text)
	switch {
	case err != nil:
		v.fail(n, path, `must be a duration like "30s" or "1m30s", got %s`, strconv.Quote(n.text))
		return 0
	case d <= 0:
		v.fail(n, path, "must be greater than 0, got %s", strconv.Quote(n.text))
		return 0
	}
	return d
}

// join appends a key to a path, quoting keys that are not plain words so a
// path stays unambiguous: tiers.pro, tiers["my.tier"].
func join(path, key string) string {
	plain := key != "" && !strings.ContainsFunc(key, func(r rune) bool {
		return !(r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}
