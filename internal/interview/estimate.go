package interview

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Estimate is one ```estimate block: named figures, each a number stated
// as an input or an expression of the figures above it.
//
//	peak_rps     = 2000                   # an input, with a note
//	tokens_per_s = peak_rps * (600 + 300) ≈ "1.8 M tokens a second"
//
// A figure may say how the prose quotes it (after ≈, in quotes): the
// quoted figure's number must equal the computed value to the precision it
// is written with ("10,700" to ±50, "1.8 M" to ±0.05 M, "63 %" to ±0.5 %).
type Estimate struct {
	Line    int // of the opening fence, counted in the text it came from
	Figures []Figure
}

// Figure is one line of an estimate.
type Figure struct {
	Name  string
	Expr  string
	Value float64
	Shown string // as the prose quotes it; "" when it does not
	Line  int
}

var (
	figureName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	shownValue = regexp.MustCompile(`^[~≈]?\s*([+\-−]?)\s*\$?([0-9][0-9,]*(?:\.[0-9]+)?)(?:\s*(%)|\s*(k|K|M|B|bn|thousand|million|billion)\b)?`)
	scales     = map[string]float64{"": 1, "k": 1e3, "K": 1e3, "thousand": 1e3, "M": 1e6, "million": 1e6, "B": 1e9, "bn": 1e9, "billion": 1e9}
)

// Estimates finds and computes every estimate block in a Markdown text.
func Estimates(text string) ([]Estimate, error) {
	var out []Estimate
	var cur *Estimate
	var env map[string]float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		trimmed := strings.TrimSpace(sc.Text())
		switch {
		case cur == nil && trimmed == "```estimate":
			cur, env = &Estimate{Line: n}, map[string]float64{}
		case cur != nil && trimmed == "```":
			if len(cur.Figures) == 0 {
				return nil, fmt.Errorf("line %d: an empty estimate block", cur.Line)
			}
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			f, err := figureOf(trimmed, n, env)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if f != nil {
				cur.Figures = append(cur.Figures, *f)
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: an estimate block never closed", cur.Line)
	}
	return out, nil
}

// figureOf reads and computes one line of a block; nil for a blank line or
// a comment.
func figureOf(line string, n int, env map[string]float64) (*Figure, error) {
	line, _, _ = cutOutsideQuotes(line, '#')
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, nil
	}
	def, shown, hasShown := strings.Cut(line, "≈")
	name, expr, ok := strings.Cut(def, "=")
	name, expr = strings.TrimSpace(name), strings.TrimSpace(expr)
	if !ok || !figureName.MatchString(name) || expr == "" {
		return nil, fmt.Errorf("%q is not `name = expression`", line)
	}
	if _, dup := env[name]; dup {
		return nil, fmt.Errorf("%s is defined twice", name)
	}
	v, err := Eval(expr, env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f := &Figure{Name: name, Expr: expr, Value: v, Line: n}
	if hasShown {
		s := strings.TrimSpace(shown)
		if len(s) < 2 || !strings.HasPrefix(s, `"`) || !strings.HasSuffix(s, `"`) {
			return nil, fmt.Errorf("%s: the figure as quoted goes in double quotes after ≈", name)
		}
		f.Shown = s[1 : len(s)-1]
		if err := Matches(f.Shown, v); err != nil {
			return nil, fmt.Errorf("%s = %s: %w", name, expr, err)
		}
	}
	env[name] = v
	return f, nil
}

// cutOutsideQuotes is strings.Cut on the first sep outside double quotes.
func cutOutsideQuotes(s string, sep rune) (before, after string, found bool) {
	in := false
	for i, r := range s {
		switch {
		case r == '"':
			in = !in
		case r == sep && !in:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// Matches checks that a figure as quoted ("10,700 slots", "$373,000 a
// day", "1.8 M", "63 %") is value, to the precision the quote is written
// with: half a unit of its last significant digit.
func Matches(shown string, value float64) error {
	m := shownValue.FindStringSubmatch(strings.TrimSpace(shown))
	if m == nil {
		return fmt.Errorf("%q does not start with a number", shown)
	}
	digits := strings.ReplaceAll(m[2], ",", "")
	n, err := strconv.ParseFloat(digits, 64)
	if err != nil {
		return fmt.Errorf("%q: %w", shown, err)
	}
	tol := 0.5
	if whole, frac, ok := strings.Cut(digits, "."); ok {
		tol = 0.5 * math.Pow(10, -float64(len(frac)))
	} else if trimmed := strings.TrimRight(whole, "0"); trimmed != "" {
		tol = 0.5 * math.Pow(10, float64(len(whole)-len(trimmed)))
	}
	scale := scales[m[4]]
	if m[3] == "%" {
		scale = 0.01
	}
	if m[1] != "" && m[1] != "+" {
		n = -n
	}
	n, tol = n*scale, tol*scale
	if math.Abs(value-n) > tol+1e-9*math.Abs(value) {
		return fmt.Errorf("quoted as %q, but it computes to %s", shown, strconv.FormatFloat(value, 'g', 6, 64))
	}
	return nil
}

// Eval computes an arithmetic expression in Go syntax over named figures:
// numbers (1_800_000 and 1.8e6 read), + - * / and parentheses, and the
// functions ceil, floor, round, min, max, ln, log2, pow and sqrt.
func Eval(expr string, env map[string]float64) (float64, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return 0, fmt.Errorf("%q does not parse: %w", expr, err)
	}
	return eval(e, env)
}

func eval(e ast.Expr, env map[string]float64) (float64, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.INT && e.Kind != token.FLOAT {
			return 0, fmt.Errorf("%s is not a number", e.Value)
		}
		return strconv.ParseFloat(strings.ReplaceAll(e.Value, "_", ""), 64)
	case *ast.Ident:
		v, ok := env[e.Name]
		if !ok {
			return 0, fmt.Errorf("%s is not defined above", e.Name)
		}
		return v, nil
	case *ast.ParenExpr:
		return eval(e.X, env)
	case *ast.UnaryExpr:
		v, err := eval(e.X, env)
		switch {
		case err != nil:
			return 0, err
		case e.Op == token.SUB:
			return -v, nil
		case e.Op == token.ADD:
			return v, nil
		}
		return 0, fmt.Errorf("operator %s is not arithmetic", e.Op)
	case *ast.BinaryExpr:
		return binary(e, env)
	case *ast.CallExpr:
		return call(e, env)
	}
	return 0, fmt.Errorf("%T is not arithmetic", e)
}

func binary(e *ast.BinaryExpr, env map[string]float64) (float64, error) {
	x, err := eval(e.X, env)
	if err != nil {
		return 0, err
	}
	y, err := eval(e.Y, env)
	if err != nil {
		return 0, err
	}
	switch e.Op {
	case token.ADD:
		return x + y, nil
	case token.SUB:
		return x - y, nil
	case token.MUL:
		return x * y, nil
	case token.QUO:
		if y == 0 {
			return 0, errors.New("division by zero")
		}
		return x / y, nil
	}
	return 0, fmt.Errorf("operator %s is not arithmetic", e.Op)
}

var funcs = map[string]struct {
	arity int // -1: one or more
	f     func(xs []float64) float64
}{
	"ceil":  {1, func(x []float64) float64 { return math.Ceil(x[0]) }},
	"floor": {1, func(x []float64) float64 { return math.Floor(x[0]) }},
	"round": {1, func(x []float64) float64 { return math.Round(x[0]) }},
	"ln":    {1, func(x []float64) float64 { return math.Log(x[0]) }},
	"log2":  {1, func(x []float64) float64 { return math.Log2(x[0]) }},
	"sqrt":  {1, func(x []float64) float64 { return math.Sqrt(x[0]) }},
	"pow":   {2, func(x []float64) float64 { return math.Pow(x[0], x[1]) }},
	"min":   {-1, func(x []float64) float64 { return fold(x, math.Min) }},
	"max":   {-1, func(x []float64) float64 { return fold(x, math.Max) }},
}

func fold(xs []float64, f func(a, b float64) float64) float64 {
	v := xs[0]
	for _, x := range xs[1:] {
		v = f(v, x)
	}
	return v
}

func call(e *ast.CallExpr, env map[string]float64) (float64, error) {
	id, ok := e.Fun.(*ast.Ident)
	if !ok {
		return 0, errors.New("only the functions ceil, floor, round, min, max, ln, log2, pow, sqrt")
	}
	fn, ok := funcs[id.Name]
	switch {
	case !ok:
		return 0, fmt.Errorf("no function %s (ceil, floor, round, min, max, ln, log2, pow, sqrt)", id.Name)
	case fn.arity >= 0 && len(e.Args) != fn.arity, len(e.Args) == 0:
		return 0, fmt.Errorf("%s takes %d arguments", id.Name, max(fn.arity, 1))
	}
	args := make([]float64, len(e.Args))
	for i, a := range e.Args {
		v, err := eval(a, env)
		if err != nil {
			return 0, err
		}
		args[i] = v
	}
	v := fn.f(args)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s of %v is not a number", id.Name, args)
	}
	return v, nil
}
