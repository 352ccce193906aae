package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"math"
	"slices"
	"strings"
)

// The HTML report is one self-contained file: inline SVG charts and a table, no script and
// no network asset, so it opens anywhere (offline, attached to an issue, archived).

// series is one line of a chart.
type series struct {
	name  string
	color string
	ys    []float64
}

// renderHTML renders the report as a page.
func renderHTML(r *Report) string {
	var b strings.Builder
	title := fmt.Sprintf("parley bench %s — %s", r.Scenario, r.StartedAt.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:12px 0}td{padding:3px 12px 3px 0;vertical-align:top}
td:first-child{color:#666;white-space:nowrap}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.bad{color:#b00;font-weight:bold}svg{display:block;margin:8px 0}pre{background:#f6f6f6;padding:8px;overflow:auto}
</style></head><body>
<h1>%s</h1>
`, html.EscapeString(title), html.EscapeString(title))

	var xs []float64
	pick := func(f func(Point) float64) []float64 {
		out := make([]float64, len(r.Timeline))
		for i, p := range r.Timeline {
			out[i] = f(p)
		}
		return out
	}
	for _, p := range r.Timeline {
		xs = append(xs, p.T)
	}

	b.WriteString("<table>")
	cell := func(k, v string) {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td></tr>", html.EscapeString(k), v)
	}
	cfg, _ := json.Marshal(r.Config)
	cell("configuration", html.EscapeString(string(cfg)))
	cell("server", html.EscapeString(r.Server))
	cell("load time", fmt.Sprintf("%.2f s", r.DurationS))
	cell("operations", fmt.Sprintf("%d (%.0f/s) — %s", r.Ops, r.OpsPerSec, html.EscapeString(r.Op)))
	cell("acked", fmt.Sprintf("%d (%.0f/s)", r.Acked, r.AckedPerSec))
	cell("deliveries", fmt.Sprintf("%d (%.0f/s), expected %d", r.Deliveries, r.DeliveriesPerSec, r.ExpectedDeliveries))
	cell("latency ms ("+r.Op+")", html.EscapeString(fmtLat(r.Latency)))
	cell("delivery ms (send → receive)", html.EscapeString(fmtLat(r.DeliveryLatency)))
	cell("errors", html.EscapeString(fmtCounts(r.Errors)))
	viol := fmt.Sprintf("%d %s", r.Violations, html.EscapeString(fmtCounts(r.ViolationsByKind)))
	if r.Violations > 0 {
		viol = `<span class="bad">` + viol + `</span>`
	}
	cell("violations", viol)
	cell("server", fmt.Sprintf("cpu %.0f%% (%.1f s), rss peak %s (start %s)", r.ServerCPUPct, r.ServerCPUSeconds, fmtBytes(r.ServerRSSBytes), fmtBytes(r.ServerRSSStartBytes)))
	cell("client", fmt.Sprintf("cpu %.0f%% (%.1f s), max rss %s", r.ClientCPUPct, r.ClientCPUSeconds, fmtBytes(float64(r.ClientMaxRSSBytes))))
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		cell(k, fmt.Sprintf("%.4g", r.Extra[k]))
	}
	b.WriteString("</table>\n")
	writeRunsHTML(&b, r)

	if len(xs) > 0 {
		b.WriteString("<h2>Throughput over time (per second)</h2>\n")
		b.WriteString(svgChart(xs, "/s", []series{
			{"operations", "#1f77b4", pick(func(p Point) float64 { return p.OpsPerSec })},
			{"acked", "#2ca02c", pick(func(p Point) float64 { return p.AckedPerSec })},
			{"deliveries", "#ff7f0e", pick(func(p Point) float64 { return p.DeliveriesPerSec })},
		}))
		b.WriteString("<h2>Latency over time (ms)</h2>\n")
		b.WriteString(svgChart(xs, "ms", []series{
			{"p50 " + r.Op, "#1f77b4", pick(func(p Point) float64 { return p.P50 })},
			{"p99 " + r.Op, "#d62728", pick(func(p Point) float64 { return p.P99 })},
			{"max " + r.Op, "#9467bd", pick(func(p Point) float64 { return p.Max })},
			{"p99 delivery", "#ff7f0e", pick(func(p Point) float64 { return p.DeliveryP99 })},
		}))
		b.WriteString("<h2>Server CPU (%) and resident memory (MiB)</h2>\n")
		b.WriteString(svgChart(xs, "", []series{
			{"cpu %", "#8c564b", pick(func(p Point) float64 { return p.ServerCPUPct })},
			{"rss MiB", "#17becf", pick(func(p Point) float64 { return p.ServerRSSBytes / (1 << 20) })},
		}))
	}
	if len(r.ViolationSamples) > 0 {
		b.WriteString("<h2>Violations</h2><pre>")
		for _, v := range r.ViolationSamples {
			b.WriteString(html.EscapeString(v.String()) + "\n")
		}
		b.WriteString("</pre>\n")
	}
	raw, _ := json.MarshalIndent(r, "", "  ")
	b.WriteString("<h2>All figures (JSON)</h2><pre>" + html.EscapeString(string(raw)) + "</pre>\n</body></html>\n")
	return b.String()
}

// writeRunsHTML adds the spread over the runs (--runs) and the comparison with echo
// (--baseline) to the page.
func writeRunsHTML(b *strings.Builder, r *Report) {
	spreadTable := func(title string, a *Report) {
		if len(a.Runs) < 2 {
			return
		}
		fmt.Fprintf(b, "<h2>%s: %d runs (charts: run %d, the median one)</h2>\n<table><tr><td></td><td>median</td><td>min</td><td>max</td><td>per run</td></tr>", html.EscapeString(title), len(a.Runs), a.MedianRun)
		for _, f := range figures(a.Runs) {
			xs := f.values(a.Runs)
			s := spreadOf(xs)
			per := make([]string, len(xs))
			for i, x := range xs {
				per[i] = fmtValue(f.unit, x)
			}
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>", html.EscapeString(f.label),
				html.EscapeString(fmtValue(f.unit, s.Median)), html.EscapeString(fmtValue(f.unit, s.Min)), html.EscapeString(fmtValue(f.unit, s.Max)), html.EscapeString(strings.Join(per, "  ")))
		}
		b.WriteString("</table>\n")
	}
	spreadTable(r.Scenario, r)
	if e := r.Baseline; e != nil {
		fmt.Fprintf(b, "<h2>Baseline: echo (bare WebSocket round trips on this machine)</h2>\n<table>")
		fmt.Fprintf(b, "<tr><td>throughput</td><td>%s %.0f acked/s, echo %.0f round trips/s: ratio %.3f</td></tr>", html.EscapeString(r.Scenario), r.AckedPerSec, e.AckedPerSec, e.Ratio)
		fmt.Fprintf(b, "<tr><td>latency p99 ms</td><td>%s %s, echo %s</td></tr>", html.EscapeString(r.Scenario), fmtMS(r.Latency.P99), fmtMS(e.Latency.P99))
		fmt.Fprintf(b, "<tr><td>echo latency ms</td><td>%s</td></tr>", html.EscapeString(fmtLat(e.Latency)))
		b.WriteString("</table>\n")
		spreadTable("echo", e.Report)
	}
}

// svgChart draws line series over xs (seconds) with axes, ticks and a legend.
func svgChart(xs []float64, unit string, ss []series) string {
	const (
		w, h             = 900, 260
		left, right      = 70, 20
		top, bottom      = 14, 54
		plotW, plotH     = w - left - right, h - top - bottom
		xTicks, yTickMax = 8, 6
	)
	xmax := xs[len(xs)-1]
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				ymax = max(ymax, y)
			}
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ystep := niceStep(ymax / yTickMax)
	ymax = math.Ceil(ymax/ystep) * ystep
	if xmax <= 0 {
		xmax = 1
	}
	px := func(x float64) float64 { return left + x/xmax*plotW }
	py := func(y float64) float64 { return top + plotH - y/ymax*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11" font-family="sans-serif">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>`, left, top, plotW, plotH)
	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`, left, left+plotW, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`, left-6, py(y)+4, fmtTick(y))
	}
	xstep := niceStep(xmax / xTicks)
	for x := 0.0; x <= xmax+xstep/100; x += xstep {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>`, px(x), px(x), top, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%ss</text>`, px(x), top+plotH+15, fmtTick(x))
	}
	if unit != "" {
		fmt.Fprintf(&b, `<text x="12" y="%d" fill="#555" transform="rotate(-90 12 %d)">%s</text>`, top+plotH/2, top+plotH/2, html.EscapeString(unit))
	}
	lx := float64(left)
	for _, s := range ss {
		var pts []string
		for i, y := range s.ys {
			if i < len(xs) && !math.IsNaN(y) && !math.IsInf(y, 0) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(y)))
			}
		}
		if len(pts) == 1 {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, strings.Split(pts[0], ",")[0], strings.Split(pts[0], ",")[1], s.color)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, s.color, strings.Join(pts, " "))
		ly := float64(h - 12)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="14" height="4" fill="%s"/>`, lx, ly-4, s.color)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#333">%s</text>`, lx+18, ly, html.EscapeString(s.name))
		lx += 24 + 7*float64(len(s.name)) + 16
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", math.Round(v*1000)/1000)
}
