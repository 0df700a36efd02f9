package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"
)

// Chart size (SVG user units).
const (
	chartW = 240
	chartH = 60
)

// chart is a small inline SVG of a handler's lateness p50 and p99 over the
// sample window: two polylines on a y axis from 0 to Max.
type chart struct {
	W, H     int
	P50, P99 string // polyline points
	Max      string // the top of the y axis, for people
	Span     string // the x axis's length, for people
	Points   int
	Dots     []dot // the p99 points, so that a lone point shows
}

type dot struct{ X, Y string }

// newChart scales points to the chart, whose x axis runs from `from` (the
// oldest sample kept) to the newest point; nil when there is nothing to
// draw.
func newChart(pts []latenessPoint, from time.Time) *chart {
	if len(pts) == 0 {
		return nil
	}
	top := 0.0
	for _, p := range pts {
		top = max(top, p.p99)
	}
	if top <= 0 {
		top = 0.001
	}
	end := pts[len(pts)-1].at
	span := end.Sub(from).Seconds()
	x := func(at time.Time) float64 {
		if span <= 0 {
			return chartW
		}
		return max(0, at.Sub(from).Seconds()/span) * chartW
	}
	y := func(v float64) float64 { return chartH - v/top*(chartH-2) - 1 }
	var p50, p99 strings.Builder
	var dots []dot
	for _, p := range pts {
		fmt.Fprintf(&p50, "%.1f,%.1f ", x(p.at), y(p.p50))
		fmt.Fprintf(&p99, "%.1f,%.1f ", x(p.at), y(p.p99))
		dots = append(dots, dot{fmt.Sprintf("%.1f", x(p.at)), fmt.Sprintf("%.1f", y(p.p99))})
	}
	return &chart{W: chartW, H: chartH, P50: strings.TrimSpace(p50.String()), P99: strings.TrimSpace(p99.String()), Max: seconds(top), Span: end.Sub(from).Round(time.Second).String(), Points: len(pts), Dots: dots}
}

// pathEscape escapes one path segment (a task id, a handler name). A
// segment of dots only ("." or "..", which url.PathEscape leaves as they
// are) has its dots escaped too: a browser removes such a segment, and
// the one before it, from a link's path before it asks, so the link of a
// task named ".." led to the dashboard's root and its forms elsewhere.
func pathEscape(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

func queryEscape(s string) string { return url.QueryEscape(s) }

// funcs are the templates' functions.
var funcs = template.FuncMap{
	"pathEscape":  pathEscape,
	"queryEscape": queryEscape,
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "–"
			}
			return v.UTC().Format("2006-01-02 15:04:05.000Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "–"
			}
			return v.UTC().Format("2006-01-02 15:04:05.000Z")
		}
		return "–"
	},
	"ago": func(t any) string {
		var v time.Time
		switch x := t.(type) {
		case time.Time:
			v = x
		case *time.Time:
			if x == nil {
				return ""
			}
			v = *x
		}
		if v.IsZero() {
			return ""
		}
		d := time.Until(v).Round(time.Second)
		if d >= 0 {
			return "in " + d.String()
		}
		return (-d).String() + " ago"
	},
	"ms": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"deref": func(p any) string {
		switch v := p.(type) {
		case *int:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *int64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *bool:
			if v != nil {
				return fmt.Sprint(*v)
			}
		}
		return "–"
	},
	"lower": strings.ToLower,
	"trunc": func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
}
