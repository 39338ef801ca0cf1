// Package policy loads the tier policy: what each tier of tenant may do.
//
// # The model
//
// A tenant's token names its tier (see package identity); the tier names its
// limits. Every limit is a number an operator sets in one file, read once at
// start and never again, so a typo must stop the start, not surface weeks
// later as a tier with no burst or an unlimited token quota. The loader is
// therefore strict:
//
//   - every field of every tier is required (tokens_per_minute: 0 says "no
//     token quota" explicitly; leaving it out is an error, not a default);
//   - unknown and duplicate keys are errors (a misspelt "brust" would
//     otherwise be ignored, leaving burst unset);
//   - types are exact: a quoted "10" is not a number, 1.5 is not a whole
//     number, 30 is not a duration;
//   - each error names the file, the line and column, and the field path, in
//     the form an editor jumps to: "tiers.yaml:12:12: tiers.pro.burst: must
//     be at least 1, got 0". Every error in the file is reported, in file
//     order, not just the first.
//
// The file is JSON or YAML of one shape:
//
//	tiers:
//	  free:
//	    rate_per_second: 1        # requests per second, > 0 (fractions allowed)
//	    burst: 5                  # bucket size, ≥ 1
//	    max_in_flight: 2          # concurrent requests per tenant, ≥ 1
//	    max_prompt_bytes: 32768   # request body bound for the prompt, ≥ 1
//	    models: [auto]            # allowed public model names; ["*"] = all
//	    max_request_timeout: 30s  # a Go duration, > 0
//	    tokens_per_minute: 20000  # token quota, ≥ 0; 0 = no token quota
//
// The loader does not decode into a struct: encoding/json and yaml.v3 would
// forget where each value was written (and encoding/json silently keeps the
// last of two duplicate keys). It builds a small tree of positioned nodes
// from either format (tree.go) and validates that (validate.go). Columns
// count characters from 1, as YAML does. Syntax errors are positioned by the
// parser that found them: JSON's to the byte, YAML's to a line only (the
// line where the broken construct starts). YAML anchors and aliases work
// (an error in an aliased value is reported where the alias is used); merge
// keys (<<) do not, and alias expansion is capped so an "alias bomb" is an
// error, not an out-of-memory.
//
// A loaded Policy is immutable and safe for concurrent use.
package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrInvalid matches every error about a policy file's content: syntax,
// types, unknown fields, values out of range. Each such error is an *Error
// (several are joined with errors.Join).
var ErrInvalid = errors.New("policy: invalid")

// ErrFormat is returned for a format (or file extension) that is neither
// JSON nor YAML.
var ErrFormat = errors.New("policy: unknown format")

// MaxFileBytes bounds a policy file.
const MaxFileBytes = 1 << 20

// Limit names one of a tier's limits: what refused a request, or which
// shared limit's store failed. The set is closed, so a Limit is safe as a
// metric label.
type Limit string

// The limits.
const (
	LimitTier        Limit = "tier"         // the token's tier is not in the policy
	LimitModel       Limit = "model"        // Models
	LimitPromptBytes Limit = "prompt_bytes" // MaxPromptBytes
	LimitRate        Limit = "rate"         // RatePerSecond and Burst
	LimitInFlight    Limit = "in_flight"    // MaxInFlight
	LimitTokens      Limit = "tokens"       // TokensPerMinute
)

// Limits lists every Limit.
var Limits = []Limit{LimitTier, LimitModel, LimitPromptBytes, LimitRate, LimitInFlight, LimitTokens}

// Shared reports whether every replica enforces the limit together, from
// one store (Redis): the rate, the in-flight cap and the token quota.
func (l Limit) Shared() bool { return l == LimitRate || l == LimitInFlight || l == LimitTokens }

// AllModels in Tier.Models allows every model.
const AllModels = "*"

// Tier is one tier's limits. The file's key for each field is in its
// comment; Tier has no struct tags because it is not decoded by reflection
// (see the package doc for why the loader walks the file itself).
type Tier struct {
	// Name is the tier's key in the file, matched against the token's tier claim.
	Name string
	// RatePerSecond (rate_per_second) is the sustained request rate per tenant, > 0.
	RatePerSecond float64
	// Burst (burst) is the token bucket's size per tenant, ≥ 1.
	Burst int
	// MaxInFlight (max_in_flight) caps a tenant's concurrent requests, ≥ 1.
	MaxInFlight int
	// MaxPromptBytes (max_prompt_bytes) caps the prompt a request may carry, ≥ 1.
	MaxPromptBytes int
	// Models (models) are the public model names the tier may call; AllModels alone
	// allows every model.
	Models []string
	// MaxRequestTimeout (max_request_timeout) caps a request's total time, > 0. Written as a Go
	// duration string ("30s", "1m30s").
	MaxRequestTimeout time.Duration
	// TokensPerMinute (tokens_per_minute) is the tenant's token quota, ≥ 0; 0 means none.
	TokensPerMinute int
}

// Allows reports whether the tier may call model: the model is listed, or
// the list is AllModels. Names match exactly (case-sensitive); "" is never
// allowed.
func (t Tier) Allows(model string) bool {
	if model == "" {
		return false
	}
	for _, m := range t.Models {
		if m == AllModels || m == model {
			return true
		}
	}
	return false
}

// Policy is a validated set of tiers.
type Policy struct {
	tiers map[string]Tier
	names []string // sorted
}

// Tier returns the tier called name (exact match) and whether it exists. The
// returned Tier is a copy: changing its Models does not change the Policy.
func (p *Policy) Tier(name string) (Tier, bool) {
	t, ok := p.tiers[name]
	t.Models = slices.Clone(t.Models)
	return t, ok
}

// Names returns the tier names, sorted.
func (p *Policy) Names() []string { return slices.Clone(p.names) }

// Load reads and validates the policy file at path, choosing the format by
// its extension: .json, or .yaml / .yml (any case).
func Load(path string) (*Policy, error) {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "json" && format != "yaml" && format != "yml" {
		return nil, fmt.Errorf("%w: %s: the extension must be .json, .yaml or .yml", ErrFormat, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, data, format)
}

// Parse validates a policy held in data; name is the file name the errors
// show, format is "json" or "yaml" ("yml" too, any case).
func Parse(name string, data []byte, format string) (*Policy, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: name, Line: 1, Col: 1, Msg: fmt.Sprintf("the file is over %d bytes", MaxFileBytes)}
	}
	var (
		root *node
		perr *Error
	)
	switch strings.ToLower(format) {
	case "json":
		root, perr = parseJSON(data)
	case "yaml", "yml":
		root, perr = parseYAML(data)
	default:
		return nil, fmt.Errorf("%w %q for %s: want json or yaml", ErrFormat, format, name)
	}
	if perr != nil {
		perr.File = name
		return nil, perr
	}
	v := &validator{file: name}
	p := v.policy(root)
	if len(v.errs) > 0 {
		return nil, v.err()
	}
	return p, nil
}

// Error is one problem in a policy file, at a position.
type Error struct {
	File string
	Line int    // 1-based; 0 when unknown (a few YAML errors carry no line)
	Col  int    // 1-based, in characters; 0 when only the line is known
	Path string // the field, like "tiers.pro.burst"; "" for the file as a whole
	Msg  string
}

// Error formats e as "FILE:LINE:COL: PATH: MSG", leaving out what is
// unknown or empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	b.WriteByte(':')
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, "%d:", e.Col)
		}
	}
	b.WriteByte(' ')
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes every *Error match ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }
