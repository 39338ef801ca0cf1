package main

import (
	"fmt"
	"math"
	"strings"
)

// A chart is a line chart over time, written as SVG by hand: four kinds of
// line chart do not justify a plotting library and its graphics stack in
// go.mod, and a hand-written SVG diffs cleanly when a report is re-run.
type chart struct {
	Title  string
	YLabel string
	YMax   float64 // 0: from the data
	Series []series
	Bands  []band // shaded spans: when the fault was on
}

type series struct {
	Name   string
	Color  string
	Points []point
	Dashed bool
}

type point struct{ X, Y float64 } // X in seconds since the start

// A band is a span of the scenario's time, in seconds since the start, with
// a label: shaded on a chart (when the fault was on), or a row of a table
// (a phase of the run).
type band struct {
	From, To float64
	Label    string
}

// contains reports whether t falls in the band, [From, To).
func (b band) contains(t float64) bool { return t >= b.From && t < b.To }

const (
	width, height          = 760.0, 300.0
	left, right, top, foot = 70.0, 20.0, 36.0, 56.0
)

// svg renders the chart.
func (c chart) svg() string {
	xmax, ymax := 1.0, c.YMax
	for _, s := range c.Series {
		for _, p := range s.Points {
			xmax = math.Max(xmax, p.X)
			if c.YMax == 0 {
				ymax = math.Max(ymax, p.Y)
			}
		}
	}
	ystep := niceCeil(ymax / 5)
	ymax = math.Ceil(ymax/ystep-1e-9) * ystep
	pw, ph := width-left-right, height-top-foot
	x := func(v float64) float64 { return left + v/xmax*pw }
	y := func(v float64) float64 { return top + ph - v/ymax*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, esc(c.Title))
	for _, bd := range c.Bands {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4c7c3" opacity="0.5"/>`+"\n", x(bd.From), top, x(bd.To)-x(bd.From), ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#a33">%s</text>`+"\n", x(bd.From)+4, top+14, esc(bd.Label))
	}
	for v := 0.0; v <= ymax+1e-9; v += ystep { // horizontal grid and y ticks
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+pw, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, tick(v))
	}
	step := niceCeil(xmax / 8)
	for v := 0.0; v <= xmax+1e-9; v += step { // x ticks in seconds
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0fs</text>`+"\n", x(v), top+ph+16, v)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+ph, left+pw, top+ph)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top, left, top+ph)
	fmt.Fprintf(&b, `<text transform="translate(16,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, esc(c.YLabel))
	for i, s := range c.Series {
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.X), y(math.Min(p.Y, ymax))))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.Color, dash, strings.Join(pts, " "))
		lx := left + float64(i)*150
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", lx, height-14, lx+24, height-14, s.Color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+30, height-10, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
