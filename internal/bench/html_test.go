package bench

import (
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// networkRef matches markup that would make a browser fetch something: a script or
// stylesheet from elsewhere, or any src/href/url()/@import pointing at http(s) or a
// protocol-relative address. Links written as text are fine.
var networkRef = regexp.MustCompile(`(?i)<script[^>]*\ssrc\s*=|<link[^>]*\shref\s*=|(src|href)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?\s*(https?:)?//|@import`)

// checkOffline fails the test if the page would load anything from the network.
func checkOffline(t *testing.T, page string) {
	t.Helper()
	for _, m := range networkRef.FindAllStringIndex(page, 5) {
		lo, hi := max(m[0]-60, 0), min(m[1]+60, len(page))
		t.Errorf("HTML report loads an outside asset: %q", page[lo:hi])
	}
}

// syntheticReport is a small run: a 4 s timeline, one slot with no latency sample (NaN).
func syntheticReport() *Report {
	r := &Report{
		Scenario: "direct", Op: "send", Server: "spawned",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		DurationS: 4, Ops: 4000, OpsPerSec: 1000, Acked: 3990, AckedPerSec: 997.5,
		Deliveries: 3990, DeliveriesPerSec: 997.5, ExpectedDeliveries: 3990,
		Latency: Percentiles{Count: 3990, P50: 1.25, P90: 2, P99: 4.5, P999: 6, Max: 7},
	}
	for i := 1; i <= 8; i++ {
		p := Point{
			T:                float64(i) * 0.5,
			OpsPerSec:        1000 + float64(i),
			AckedPerSec:      990 + float64(i),
			DeliveriesPerSec: 980 + float64(i),
			P50:              1 + float64(i)/8,
			P99:              4 + float64(i)/4,
			Max:              7,
			DeliveryP99:      5,
			ServerCPUPct:     40,
			ServerRSSBytes:   64 << 20,
		}
		if i == 5 {
			p.P50, p.P99 = math.NaN(), math.Inf(1)
		}
		r.Timeline = append(r.Timeline, p)
	}
	return r
}

// chartOption extracts and decodes the option go-echarts wrote for chart id.
func chartOption(t *testing.T, page, id string) map[string]any {
	t.Helper()
	m := regexp.MustCompile(`let option_` + id + ` = (\{.*\});?\n`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no option for chart %s", id)
	}
	var opt map[string]any
	if err := json.Unmarshal([]byte(m[1]), &opt); err != nil {
		t.Fatalf("chart %s option is not JSON: %v", id, err)
	}
	return opt
}

// seriesData returns the [x, y] points of the named series of a decoded option.
func seriesData(t *testing.T, opt map[string]any, name string) [][]any {
	t.Helper()
	ss, _ := opt["series"].([]any)
	for _, s := range ss {
		sm, _ := s.(map[string]any)
		if sm["name"] != name {
			continue
		}
		var out [][]any
		for _, d := range sm["data"].([]any) {
			v, _ := d.(map[string]any)["value"].([]any)
			out = append(out, v)
		}
		return out
	}
	t.Fatalf("no series %q", name)
	return nil
}

func TestHTMLReportCharts(t *testing.T) {
	page := renderHTML(syntheticReport())

	// The charts' containers, each followed by its drawing script.
	for _, id := range []string{"bench_throughput", "bench_latency", "bench_server"} {
		el := strings.Index(page, `id="`+id+`"`)
		init := strings.Index(page, `echarts.init(document.getElementById('`+id+`')`)
		if el < 0 || init < el {
			t.Errorf("chart %s: container at %d, init at %d", id, el, init)
		}
	}

	// The data: the figures of the timeline, a gap where a slot had no sample.
	lat := chartOption(t, page, "bench_latency")
	p99 := seriesData(t, lat, "p99 send")
	if len(p99) != 8 {
		t.Fatalf("p99 series has %d points, want 8", len(p99))
	}
	if p99[0][0] != 0.5 || p99[0][1] != 4.25 || p99[7][0] != 4.0 || p99[7][1] != 6.0 {
		t.Errorf("p99 series %v", p99)
	}
	if p99[4][1] != "-" {
		t.Errorf("infinite p99 drawn as %v, want a gap", p99[4][1])
	}
	if p50 := seriesData(t, lat, "p50 send"); p50[0][1] != 1.125 || p50[4][1] != "-" {
		t.Errorf("p50 series %v", p50)
	}
	thr := chartOption(t, page, "bench_throughput")
	if acked := seriesData(t, thr, "acked"); acked[1][1] != 992.0 {
		t.Errorf("acked series %v", acked)
	}
	if del := seriesData(t, thr, "deliveries"); del[2][1] != 983.0 {
		t.Errorf("deliveries series %v", del)
	}
	if rss := seriesData(t, chartOption(t, page, "bench_server"), "rss MiB"); rss[0][1] != 64.0 {
		t.Errorf("rss series %v", rss)
	}

	// Nothing from the network; the library itself is inline, once, before the first chart.
	checkOffline(t, page)
	lib := strings.Index(page, echartsJS)
	if len(echartsJS) < 500_000 || lib < 0 || strings.Count(page, echartsJS) != 1 {
		t.Fatalf("inline echarts script missing (library %d bytes, at %d)", len(echartsJS), lib)
	}
	if !strings.Contains(echartsJS, `version="`+echartsVersion+`"`) {
		t.Errorf("assets/echarts.min.js is not ECharts %s", echartsVersion)
	}
	if strings.Contains(strings.ToLower(echartsJS), "</script") {
		t.Error("assets/echarts.min.js contains </script and cannot be inlined as is")
	}
	if first := strings.Index(page, "echarts.init("); first < lib {
		t.Errorf("a chart is drawn (at %d) before the library is loaded (at %d)", first, lib)
	}

	// The rest of the report is still there.
	for _, want := range []string{"<table>", "latency ms (send)", "p50 1.25", "All figures (JSON)"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestHTMLReportWithoutTimeline(t *testing.T) {
	r := syntheticReport()
	r.Timeline = nil
	page := renderHTML(r)
	checkOffline(t, page)
	if strings.Contains(page, "echarts") || len(page) > 100_000 {
		t.Errorf("a report without a timeline carries the chart library (%d bytes)", len(page))
	}
}

func TestCheckOffline(t *testing.T) {
	for _, bad := range []string{
		`<script src="https://cdn.example/echarts.min.js"></script>`,
		`<script type="text/javascript" src="echarts.min.js"></script>`,
		`<link href="https://example.com/x.css" rel="stylesheet">`,
		`<img src="//example.com/x.png">`,
		`<div style="background:url(https://example.com/x.png)">`,
	} {
		if !networkRef.MatchString(bad) {
			t.Errorf("not caught: %s", bad)
		}
	}
	if networkRef.MatchString(`<p>see https://example.com/issue/1</p><script>var a=1;</script>`) {
		t.Error("a link in text or an inline script was taken for a load")
	}
}
