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
	Points   int
}

// newChart scales points to the chart; nil when there is nothing to draw.
func newChart(pts []latenessPoint, window time.Duration) *chart {
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
	x := func(at time.Time) float64 {
		f := 1 - end.Sub(at).Seconds()/window.Seconds()
		return max(0, f) * chartW
	}
	y := func(v float64) float64 { return chartH - v/top*(chartH-2) - 1 }
	var p50, p99 strings.Builder
	for _, p := range pts {
		fmt.Fprintf(&p50, "%.1f,%.1f ", x(p.at), y(p.p50))
		fmt.Fprintf(&p99, "%.1f,%.1f ", x(p.at), y(p.p99))
	}
	return &chart{W: chartW, H: chartH, P50: strings.TrimSpace(p50.String()), P99: strings.TrimSpace(p99.String()), Max: seconds(top), Points: len(pts)}
}

// pathEscape escapes one path segment (a task id, a handler name).
func pathEscape(s string) string { return url.PathEscape(s) }

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
