package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	tests := []struct {
		xs   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{7}, Spread{7, 7, 7}},
		{[]float64{3, 1, 2}, Spread{2, 1, 3}},                        // odd: the middle one
		{[]float64{10, 1, 4, 2}, Spread{3, 1, 10}},                   // even: the mean of the two middle ones
		{[]float64{5, 5, 1, 9, 5}, Spread{5, 1, 9}},                  // repeats
		{[]float64{-1, 0.5, 0.25, 100, 2, 3}, Spread{1.25, -1, 100}}, // even, unsorted
	}
	for _, tc := range tests {
		in := append([]float64(nil), tc.xs...)
		if got := spreadOf(tc.xs); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Fatalf("spreadOf reordered its input: %v", tc.xs)
			}
		}
	}
}

// TestRunsWithBaseline runs direct twice, each run followed by an echo run, and checks that
// the top level holds the medians of the per-run figures and the ratio against echo.
func TestRunsWithBaseline(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("direct")
	cfg.Pairs, cfg.Duration, cfg.Runs, cfg.Baseline = 3, 700*time.Millisecond, 2, true
	cfg.JSONPath = filepath.Join(t.TempDir(), "runs.json")
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs reported, want 2", len(rep.Runs))
	}
	r1, r2 := rep.Runs[0], rep.Runs[1]
	mean := func(a, b float64) float64 { return (a + b) / 2 }
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want the median %v", name, got, want)
		}
	}
	near("acked_per_sec", rep.AckedPerSec, mean(r1.AckedPerSec, r2.AckedPerSec))
	near("deliveries_per_sec", rep.DeliveriesPerSec, mean(r1.DeliveriesPerSec, r2.DeliveriesPerSec))
	near("latency p50", rep.Latency.P50, mean(r1.Latency.P50, r2.Latency.P50))
	near("latency p99", rep.Latency.P99, mean(r1.Latency.P99, r2.Latency.P99))
	near("server_rss_bytes", rep.ServerRSSBytes, mean(r1.ServerRSSBytes, r2.ServerRSSBytes))
	s := rep.Spread["acked_per_sec"]
	near("spread median", s.Median, rep.AckedPerSec)
	near("spread min", s.Min, min(r1.AckedPerSec, r2.AckedPerSec))
	near("spread max", s.Max, max(r1.AckedPerSec, r2.AckedPerSec))
	if r1.Acked == 0 || r2.Acked == 0 || r1.StartedAt.Equal(r2.StartedAt) {
		t.Fatalf("runs not distinct: %+v / %+v", r1, r2)
	}
	if rep.Violations != r1.Violations+r2.Violations {
		t.Errorf("violations %d, want the sum %d", rep.Violations, r1.Violations+r2.Violations)
	}

	b := rep.Baseline
	if b == nil || b.Report == nil || b.Scenario != "echo" || len(b.Runs) != 2 {
		t.Fatalf("no baseline of two echo runs: %+v", b)
	}
	if b.AckedPerSec <= 0 || b.Violations != 0 || b.Config.Senders != cfg.Pairs || b.Config.Size != cfg.Size {
		t.Fatalf("echo baseline: %.0f round trips/s, %d violations, config %+v", b.AckedPerSec, b.Violations, b.Config)
	}
	near("baseline acked_per_sec", b.AckedPerSec, mean(b.Runs[0].AckedPerSec, b.Runs[1].AckedPerSec))
	near("ratio", b.Ratio, rep.AckedPerSec/b.AckedPerSec)

	raw, err := os.ReadFile(cfg.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		AckedPerSec float64           `json:"acked_per_sec"`
		Runs        []json.RawMessage `json:"runs"`
		Baseline    struct {
			Scenario    string  `json:"scenario"`
			AckedPerSec float64 `json:"acked_per_sec"`
			Ratio       float64 `json:"ratio"`
		} `json:"baseline"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Runs) != 2 || m.AckedPerSec != rep.AckedPerSec || m.Baseline.Scenario != "echo" || m.Baseline.Ratio != b.Ratio || m.Baseline.AckedPerSec != b.AckedPerSec {
		t.Errorf("JSON: %d runs, acked_per_sec %v, baseline %+v", len(m.Runs), m.AckedPerSec, m.Baseline)
	}
}

func TestEcho(t *testing.T) {
	cfg := DefaultConfig("echo")
	cfg.Senders, cfg.Duration, cfg.Procs = 4, 700*time.Millisecond, 2
	rep, err := runBench(t, nil, cfg, nil)
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if rep.Violations != 0 || len(rep.Errors) != 0 {
		t.Fatalf("violations %v, errors %v", rep.ViolationSamples, rep.Errors)
	}
	if rep.Acked == 0 || rep.Ops != rep.Acked || rep.Latency.Count != rep.Acked || rep.Latency.P50 <= 0 {
		t.Fatalf("round trips %d, ops %d, latency %+v", rep.Acked, rep.Ops, rep.Latency)
	}
	if rep.Extra["frame_bytes"] <= float64(cfg.Size) {
		t.Errorf("frame of %v bytes for %d content bytes", rep.Extra["frame_bytes"], cfg.Size)
	}
	if rep.ServerCPUSeconds <= 0 && rep.ServerRSSBytes <= 0 {
		t.Errorf("echo server not measured")
	}
}

func TestCPUPerMessage(t *testing.T) {
	tests := []struct {
		name                       string
		acked, deliveries          int64
		server, client             float64 // CPU seconds
		wantSrv, wantCli           float64 // µs per message
		wantSrvDeliv, wantCliDeliv float64 // µs per delivery
	}{
		{name: "direct", acked: 10000, deliveries: 10000, server: 2.5, client: 1, wantSrv: 250, wantCli: 100},
		{name: "group", acked: 100, deliveries: 50000, server: 5, client: 2, wantSrv: 50000, wantCli: 20000, wantSrvDeliv: 100, wantCliDeliv: 40},
		{name: "echo", acked: 200000, server: 2, client: 3, wantSrv: 10, wantCli: 15},
		{name: "nothing acked", server: 1, client: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{Acked: tt.acked, Deliveries: tt.deliveries, ServerCPUSeconds: tt.server, ClientCPUSeconds: tt.client}
			r.cpuPerMessage()
			got := []float64{r.ServerCPUUsPerMsg, r.ClientCPUUsPerMsg, r.ServerCPUUsPerDelivery, r.ClientCPUUsPerDelivery}
			want := []float64{tt.wantSrv, tt.wantCli, tt.wantSrvDeliv, tt.wantCliDeliv}
			for i := range got {
				if math.Abs(got[i]-want[i]) > 1e-9*max(1, want[i]) {
					t.Fatalf("per msg (server, generator), per delivery (server, generator) = %v, want %v", got, want)
				}
			}
		})
	}
}
