package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"slices"
	"strings"
)

// The HTML report is one self-contained file: tables, and charts drawn by the Apache
// ECharts library inlined into the page (charts.go). It loads nothing from the network, so
// it opens anywhere (offline, attached to an issue, archived).

// renderHTML renders the report as a page.
func renderHTML(r *Report) string {
	var b strings.Builder
	title := fmt.Sprintf("parley-bench %s — %s", r.Scenario, r.StartedAt.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:12px 0}td{padding:3px 12px 3px 0;vertical-align:top}
td:first-child{color:#666;white-space:nowrap}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.bad{color:#b00;font-weight:bold}.item{margin:8px 0}pre{background:#f6f6f6;padding:8px;overflow:auto}
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
	cell("server", html.EscapeString(r.Server+" — "+fmtEnvServer(r.Env)))
	if r.Topology != nil {
		cell("topology", html.EscapeString(r.Topology.String()))
	}
	cell("bench", html.EscapeString(fmtEnvBench(r.Env)))
	cell("load time", fmt.Sprintf("%.2f s", r.DurationS))
	cell("operations", fmt.Sprintf("%d (%.0f/s) — %s", r.Ops, r.OpsPerSec, html.EscapeString(r.Op)))
	cell("acked", fmt.Sprintf("%d (%.0f/s)", r.Acked, r.AckedPerSec))
	cell("deliveries", fmt.Sprintf("%d (%.0f/s), expected %d", r.Deliveries, r.DeliveriesPerSec, r.ExpectedDeliveries))
	cell("latency ms ("+r.Op+")", html.EscapeString(fmtLat(r.Latency)))
	cell("delivery ms (send → receive)", html.EscapeString(fmtLat(r.DeliveryLatency)))
	cell("errors", html.EscapeString(fmtCounts(r.Errors)))
	cell("retries", html.EscapeString(fmtRetries(r)))
	viol := fmt.Sprintf("%d %s", r.Violations, html.EscapeString(fmtCounts(r.ViolationsByKind)))
	if r.Violations > 0 {
		viol = `<span class="bad">` + viol + `</span>`
	}
	cell("violations", viol)
	cell("server", fmt.Sprintf("cpu %.0f%% (%.1f s), rss peak %s (start %s)", r.ServerCPUPct, r.ServerCPUSeconds, fmtBytes(r.ServerRSSBytes), fmtBytes(r.ServerRSSStartBytes)))
	cell("client", fmt.Sprintf("cpu %.0f%% (%.1f s), max rss %s", r.ClientCPUPct, r.ClientCPUSeconds, fmtBytes(float64(r.ClientMaxRSSBytes))))
	cell("cpu per message", html.EscapeString(fmtCPUPerMsg(r)))
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		cell(k, fmt.Sprintf("%.4g", r.Extra[k]))
	}
	b.WriteString("</table>\n")
	writeRunsHTML(&b, r)

	if len(xs) > 0 {
		figs := []struct {
			title string
			chart chartHTML
		}{
			{"Throughput over time (per second)", lineChart("bench_throughput", xs, "/s", "", []series{
				{name: "operations", color: "#1f77b4", ys: pick(func(p Point) float64 { return p.OpsPerSec })},
				{name: "acked", color: "#2ca02c", ys: pick(func(p Point) float64 { return p.AckedPerSec })},
				{name: "deliveries", color: "#ff7f0e", ys: pick(func(p Point) float64 { return p.DeliveriesPerSec })},
			})},
			{"Latency over time (ms)", lineChart("bench_latency", xs, "ms", "", []series{
				{name: "p50 " + r.Op, color: "#1f77b4", ys: pick(func(p Point) float64 { return p.P50 })},
				{name: "p99 " + r.Op, color: "#d62728", ys: pick(func(p Point) float64 { return p.P99 })},
				{name: "max " + r.Op, color: "#9467bd", ys: pick(func(p Point) float64 { return p.Max })},
				{name: "p99 delivery", color: "#ff7f0e", ys: pick(func(p Point) float64 { return p.DeliveryP99 })},
			})},
			{"Server CPU (%) and resident memory (MiB)", lineChart("bench_server", xs, "cpu %", "MiB", []series{
				{name: "cpu %", color: "#8c564b", ys: pick(func(p Point) float64 { return p.ServerCPUPct })},
				{name: "rss MiB", color: "#17becf", ys: pick(func(p Point) float64 { return p.ServerRSSBytes / (1 << 20) }), right: true},
			})},
		}
		b.WriteString(echartsScript())
		for _, f := range figs {
			fmt.Fprintf(&b, "<h2>%s</h2>\n%s\n%s\n", html.EscapeString(f.title), f.chart.element, f.chart.script)
		}
		b.WriteString(chartResizeScript)
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
