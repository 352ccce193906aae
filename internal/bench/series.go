package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Speed is shown by medians of several runs and by ratios against a baseline measured in
// the same invocation: --runs repeats the scenario (each run on a fresh server when the
// bench starts its own) and reports median, min and max of every headline figure;
// --baseline interleaves echo runs (the bare transport) and reports Parley over echo.

// Spread is the median, min and max of one figure over the runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf returns the median (the mean of the two middle values for an even count), min
// and max of xs; zero for none.
func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[n-1]}
}

// Baseline is the echo side of --baseline: the echo runs' report (medians, like the main
// one) and Parley's figures over echo's.
type Baseline struct {
	*Report
	// Ratio is Parley's acked_per_sec over echo's (round trips/s), medians over the runs;
	// for broadcast, its deliveries_per_sec over the naive broadcast's.
	Ratio float64 `json:"ratio"`
	// LatencyP99Ratio is Parley's p99 send -> ack latency over echo's p99 round trip.
	LatencyP99Ratio float64 `json:"latency_p99_ratio"`
}

// baselineConfig is the echo run that goes with cfg: as many senders, the same frame
// content size, processes, duration, messages, rate and runs.
func baselineConfig(cfg Config) Config {
	if cfg.Scenario == "broadcast" {
		// The same connections, window, content size, duration and messages, against the
		// naive broadcast server.
		e := DefaultConfig("broadcast-naive")
		e.Members, e.Window, e.Size, e.Procs, e.Duration, e.Messages, e.Runs = cfg.Members, cfg.Window, cfg.Size, cfg.Procs, cfg.Duration, cfg.Messages, cfg.Runs
		e.DrainTimeout = cfg.DrainTimeout
		return e
	}
	e := DefaultConfig("echo")
	e.Senders = cfg.Pairs
	if cfg.Scenario == "group" {
		e.Senders = cfg.Senders
	}
	e.Size, e.Procs, e.Duration, e.Messages, e.Rate, e.Runs = cfg.Size, cfg.Procs, cfg.Duration, cfg.Messages, cfg.Rate, cfg.Runs
	e.DrainTimeout = cfg.DrainTimeout
	return e
}

// runSeries runs cfg.Runs runs of the scenario, each followed by an echo run with
// --baseline, then reports the medians. A run that cannot be carried out ends the series;
// the runs done are still reported.
func runSeries(ctx context.Context, cfg Config, opts Options) (*Report, error) {
	note := func(format string, args ...any) { fmt.Fprintf(opts.Stderr, "bench: "+format+"\n", args...) }
	var ecfg Config
	if cfg.Baseline {
		ecfg = baselineConfig(cfg)
		if cfg.Server != "" {
			note("baseline: the echo server runs on this machine, not beside %s", cfg.Server)
		}
	}
	var reps, echoes []*Report
	var failed error
	for i := range cfg.Runs {
		if ctx.Err() != nil {
			break
		}
		note("run %d/%d: %s", i+1, cfg.Runs, cfg.Scenario)
		rep, err := runOnce(ctx, cfg, opts)
		if err != nil {
			failed = fmt.Errorf("run %d/%d of %s: %w", i+1, cfg.Runs, cfg.Scenario, err)
			break
		}
		reps = append(reps, rep)
		note("run %d/%d: %s", i+1, cfg.Runs, oneLine(rep))
		if !cfg.Baseline || ctx.Err() != nil {
			continue
		}
		note("run %d/%d: echo baseline", i+1, cfg.Runs)
		erep, err := runOnce(ctx, ecfg, opts)
		if err != nil {
			failed = fmt.Errorf("run %d/%d of echo: %w", i+1, cfg.Runs, err)
			break
		}
		echoes = append(echoes, erep)
		note("run %d/%d: %s", i+1, cfg.Runs, oneLine(erep))
	}
	if len(reps) == 0 {
		if failed == nil {
			failed = ctx.Err()
		}
		return nil, failed
	}
	agg := aggregate(reps)
	out := opts.Stdout
	if len(reps) == 1 {
		writeTable(out, agg)
	} else {
		writeSummary(out, agg, reps)
	}
	violations := agg.Violations
	if len(echoes) > 0 {
		eagg := aggregate(echoes)
		agg.Baseline = &Baseline{Report: eagg}
		switch {
		case cfg.Scenario == "broadcast" && eagg.DeliveriesPerSec > 0:
			agg.Baseline.Ratio = agg.DeliveriesPerSec / eagg.DeliveriesPerSec
		case cfg.Scenario != "broadcast" && eagg.AckedPerSec > 0:
			agg.Baseline.Ratio = agg.AckedPerSec / eagg.AckedPerSec
		}
		if eagg.Latency.P99 > 0 {
			agg.Baseline.LatencyP99Ratio = agg.Latency.P99 / eagg.Latency.P99
		}
		fmt.Fprintln(out)
		if len(echoes) == 1 {
			writeTable(out, eagg)
		} else {
			writeSummary(out, eagg, echoes)
		}
		fmt.Fprintln(out)
		writeBaseline(out, agg)
		violations += eagg.Violations
	}
	if err := writeFiles(cfg, agg); err != nil {
		return agg, err
	}
	switch {
	case failed != nil:
		return agg, failed
	case violations > 0:
		return agg, fmt.Errorf("%d violations", violations)
	case ctx.Err() != nil && len(reps) < cfg.Runs:
		return agg, fmt.Errorf("interrupted after %d of %d runs", len(reps), cfg.Runs)
	}
	return agg, nil
}

// oneLine sums up a run for the progress output.
func oneLine(r *Report) string {
	return fmt.Sprintf("acked %.0f/s  ops %.0f/s  latency p50 %s p99 %s ms  server cpu %.0f%%  cpu µs/msg server %s generator %s  violations %d  errors %s",
		r.AckedPerSec, r.OpsPerSec, fmtMS(r.Latency.P50), fmtMS(r.Latency.P99), r.ServerCPUPct,
		fmtUs(r.ServerCPUUsPerMsg), fmtUs(r.ClientCPUUsPerMsg), r.Violations, fmtCounts(r.Errors))
}

// aggregate is the report of several runs: every figure the median over the runs (counts
// rounded), errors and violations summed, the timeline that of the median run. One run is
// its own aggregate.
func aggregate(reps []*Report) *Report {
	if len(reps) == 1 {
		return reps[0]
	}
	med := func(f func(*Report) float64) float64 {
		xs := make([]float64, len(reps))
		for i, r := range reps {
			xs[i] = f(r)
		}
		return spreadOf(xs).Median
	}
	medInt := func(f func(*Report) int64) int64 {
		return int64(math.Round(med(func(r *Report) float64 { return float64(f(r)) })))
	}
	medPct := func(f func(*Report) Percentiles) Percentiles {
		return Percentiles{
			Count: medInt(func(r *Report) int64 { return f(r).Count }),
			Mean:  med(func(r *Report) float64 { return f(r).Mean }),
			P50:   med(func(r *Report) float64 { return f(r).P50 }),
			P90:   med(func(r *Report) float64 { return f(r).P90 }),
			P99:   med(func(r *Report) float64 { return f(r).P99 }),
			P999:  med(func(r *Report) float64 { return f(r).P999 }),
			Max:   med(func(r *Report) float64 { return f(r).Max }),
		}
	}
	medMap := func(f func(*Report) map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for _, r := range reps {
			for k := range f(r) {
				out[k] = med(func(r *Report) float64 { return f(r)[k] })
			}
		}
		return out
	}
	first := reps[0]
	a := &Report{
		Scenario: first.Scenario, Config: first.Config, Server: first.Server, Topology: first.Topology, Env: first.Env, Op: first.Op, StartedAt: first.StartedAt,
		DurationS:           med(func(r *Report) float64 { return r.DurationS }),
		Ops:                 medInt(func(r *Report) int64 { return r.Ops }),
		OpsPerSec:           med(func(r *Report) float64 { return r.OpsPerSec }),
		Acked:               medInt(func(r *Report) int64 { return r.Acked }),
		AckedPerSec:         med(func(r *Report) float64 { return r.AckedPerSec }),
		Deliveries:          medInt(func(r *Report) int64 { return r.Deliveries }),
		DeliveriesPerSec:    med(func(r *Report) float64 { return r.DeliveriesPerSec }),
		ExpectedDeliveries:  medInt(func(r *Report) int64 { return r.ExpectedDeliveries }),
		Echoes:              medInt(func(r *Report) int64 { return r.Echoes }),
		Latency:             medPct(func(r *Report) Percentiles { return r.Latency }),
		DeliveryLatency:     medPct(func(r *Report) Percentiles { return r.DeliveryLatency }),
		Errors:              map[string]int64{},
		ViolationsByKind:    map[string]int64{},
		ViolationSamples:    []Violation{},
		ServerCPUPct:        med(func(r *Report) float64 { return r.ServerCPUPct }),
		ServerCPUSeconds:    med(func(r *Report) float64 { return r.ServerCPUSeconds }),
		ServerRSSBytes:      med(func(r *Report) float64 { return r.ServerRSSBytes }),
		ServerRSSStartBytes: med(func(r *Report) float64 { return r.ServerRSSStartBytes }),
		ServerCounters:      medMap(func(r *Report) map[string]float64 { return r.ServerCounters }),
		ClientCPUPct:        med(func(r *Report) float64 { return r.ClientCPUPct }),
		ClientCPUSeconds:    med(func(r *Report) float64 { return r.ClientCPUSeconds }),
		ClientMaxRSSBytes:   medInt(func(r *Report) int64 { return r.ClientMaxRSSBytes }),
		Counts:              map[string]int64{},
		Extra:               medMap(func(r *Report) map[string]float64 { return r.Extra }),
		Runs:                reps,
		Spread:              map[string]Spread{},
	}
	a.ServerCPUUsPerMsg = med(func(r *Report) float64 { return r.ServerCPUUsPerMsg })
	a.ClientCPUUsPerMsg = med(func(r *Report) float64 { return r.ClientCPUUsPerMsg })
	a.ServerCPUUsPerDelivery = med(func(r *Report) float64 { return r.ServerCPUUsPerDelivery })
	a.ClientCPUUsPerDelivery = med(func(r *Report) float64 { return r.ClientCPUUsPerDelivery })
	for _, r := range reps {
		for k, v := range r.Errors {
			a.Errors[k] += v
		}
		a.Violations += r.Violations
		a.Retries += r.Retries
		a.Retried429 += r.Retried429
		a.RateLimited += r.RateLimited
		for k, v := range r.ViolationsByKind {
			a.ViolationsByKind[k] += v
		}
		for _, v := range r.ViolationSamples {
			if len(a.ViolationSamples) < maxSamples {
				a.ViolationSamples = append(a.ViolationSamples, v)
			}
		}
		for k := range r.Counts {
			a.Counts[k] = medInt(func(r *Report) int64 { return r.Counts[k] })
		}
	}
	for _, f := range figures(reps) {
		a.Spread[f.key] = spreadOf(f.values(reps))
	}
	// The charts show one real run: the one whose main rate is the median (the lower
	// middle one for an even count).
	rate := func(r *Report) float64 { return r.AckedPerSec }
	if a.Acked == 0 {
		rate = func(r *Report) float64 { return r.OpsPerSec }
	}
	order := make([]int, len(reps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmpFloat(rate(reps[i]), rate(reps[j])) })
	mid := order[(len(order)-1)/2]
	a.MedianRun = mid + 1
	a.Timeline = reps[mid].Timeline
	return a
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// figure is one headline figure of the summary.
type figure struct {
	key   string // its key in Report.Spread
	label string
	unit  string // "/s", "ms", "µs", "bytes", "%" or ""
	get   func(*Report) float64
}

func (f figure) values(reps []*Report) []float64 {
	xs := make([]float64, len(reps))
	for i, r := range reps {
		xs[i] = f.get(r)
	}
	return xs
}

// figures lists the headline figures of reps: rates, latency percentiles, the server's CPU
// and memory, both sides' CPU per message, and every scenario figure (Report.Extra: memory per connection for idle,
// catch-up times for reconnect, commits per 1000 reads for read-storm...). Figures that are
// zero in every run are left out, and so is the operation rate where it is the ack rate.
func figures(reps []*Report) []figure {
	op := reps[0].Op
	acked := "acked/s"
	if reps[0].Scenario == "echo" {
		acked = "round trips/s"
	}
	all := []figure{
		{"ops_per_sec", "operations/s (" + op + ")", "/s", func(r *Report) float64 { return r.OpsPerSec }},
		{"acked_per_sec", acked, "/s", func(r *Report) float64 { return r.AckedPerSec }},
		{"deliveries_per_sec", "deliveries/s", "/s", func(r *Report) float64 { return r.DeliveriesPerSec }},
	}
	lat := func(name string, p func(Percentiles) float64) {
		all = append(all, figure{"latency_ms." + name, "latency " + name + " ms", "ms", func(r *Report) float64 { return p(r.Latency) }})
	}
	lat("p50", func(p Percentiles) float64 { return p.P50 })
	lat("p90", func(p Percentiles) float64 { return p.P90 })
	lat("p99", func(p Percentiles) float64 { return p.P99 })
	lat("p999", func(p Percentiles) float64 { return p.P999 })
	lat("max", func(p Percentiles) float64 { return p.Max })
	all = append(all,
		figure{"delivery_latency_ms.p50", "delivery p50 ms", "ms", func(r *Report) float64 { return r.DeliveryLatency.P50 }},
		figure{"delivery_latency_ms.p99", "delivery p99 ms", "ms", func(r *Report) float64 { return r.DeliveryLatency.P99 }},
		figure{"server_cpu_pct", "server cpu", "%", func(r *Report) float64 { return r.ServerCPUPct }},
		figure{"server_rss_bytes", "server rss peak", "bytes", func(r *Report) float64 { return r.ServerRSSBytes }},
		figure{"client_cpu_pct", "client cpu", "%", func(r *Report) float64 { return r.ClientCPUPct }},
		figure{"server_cpu_us_per_msg", "server cpu µs/msg", "µs", func(r *Report) float64 { return r.ServerCPUUsPerMsg }},
		figure{"client_cpu_us_per_msg", "generator cpu µs/msg", "µs", func(r *Report) float64 { return r.ClientCPUUsPerMsg }},
		figure{"server_cpu_us_per_delivery", "server cpu µs/delivery", "µs", func(r *Report) float64 { return r.ServerCPUUsPerDelivery }},
		figure{"client_cpu_us_per_delivery", "generator cpu µs/delivery", "µs", func(r *Report) float64 { return r.ClientCPUUsPerDelivery }},
	)
	keys := map[string]bool{}
	for _, r := range reps {
		for k := range r.Extra {
			// The storage counters stay in the runs; echo's round trips/s is its acked/s.
			keys[k] = !strings.HasPrefix(k, "delta_") && k != "round_trips_per_sec"
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !keys[k] {
			continue
		}
		unit := ""
		switch {
		case strings.HasSuffix(k, "_bytes"):
			unit = "bytes"
		case strings.HasSuffix(k, "_ms"):
			unit = "ms"
		case strings.HasSuffix(k, "_per_sec"):
			unit = "/s"
		}
		all = append(all, figure{k, k, unit, func(r *Report) float64 { return r.Extra[k] }})
	}
	var out []figure
	for _, f := range all {
		xs := f.values(reps)
		if !slices.ContainsFunc(xs, func(x float64) bool { return x != 0 }) {
			continue
		}
		if f.key == "ops_per_sec" && slices.Equal(xs, figure{get: func(r *Report) float64 { return r.AckedPerSec }}.values(reps)) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// fmtValue formats a figure's value by its unit.
func fmtValue(unit string, v float64) string {
	switch unit {
	case "/s":
		return fmt.Sprintf("%.0f", v)
	case "ms":
		return fmtMS(v)
	case "bytes":
		return fmtBytes(v)
	case "%":
		return fmt.Sprintf("%.0f%%", v)
	case "µs":
		return fmtUs(v)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// writeSummary prints the table of several runs: each headline figure's median, min, max
// and per-run values, then errors and violations summed over the runs.
func writeSummary(w io.Writer, a *Report, reps []*Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cfg, _ := json.Marshal(a.Config)
	fmt.Fprintf(tw, "scenario\t%s  %s\n", a.Scenario, cfg)
	server := "a fresh server each run"
	if a.Server != "spawned" {
		server = a.Server
	}
	fmt.Fprintf(tw, "runs\t%d, %s; median run %d (its timeline in --json/--report)\n", len(reps), server, a.MedianRun)
	fmt.Fprintf(tw, "server\t%s\n", fmtEnvServer(a.Env))
	fmt.Fprintf(tw, "bench\t%s\n", fmtEnvBench(a.Env))
	fmt.Fprintf(tw, "\tmedian\tmin\tmax\tper run\n")
	for _, f := range figures(reps) {
		xs := f.values(reps)
		s := spreadOf(xs)
		per := make([]string, len(xs))
		for i, x := range xs {
			per[i] = fmtValue(f.unit, x)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.label, fmtValue(f.unit, s.Median), fmtValue(f.unit, s.Min), fmtValue(f.unit, s.Max), strings.Join(per, "  "))
	}
	fmt.Fprintf(tw, "errors\t%s  (all runs)\n", fmtCounts(a.Errors))
	fmt.Fprintf(tw, "retries\t%s  (all runs)\n", fmtRetries(a))
	fmt.Fprintf(tw, "violations\t%d  %s  (all runs)\n", a.Violations, fmtCounts(a.ViolationsByKind))
	tw.Flush()
	for _, v := range a.ViolationSamples {
		fmt.Fprintf(w, "  violation: %s\n", v)
	}
}

// writeBaseline prints Parley against echo.
func writeBaseline(w io.Writer, a *Report) {
	b := a.Baseline
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	runs := "1 run each"
	if len(a.Runs) > 1 {
		runs = fmt.Sprintf("medians of %d runs each", len(a.Runs))
	}
	if a.Scenario == "broadcast" {
		fmt.Fprintf(tw, "baseline\tbroadcast-naive: every frame copied to every WebSocket by a bare server on this machine; %d connections, window %d, %d procs; %s\n",
			b.Config.Members, b.Config.Window, b.Config.Procs, runs)
		fmt.Fprintf(tw, "throughput\tbroadcast %.0f deliveries/s (%.0f msgs/s), naive %.0f deliveries/s (%.0f msgs/s): ratio broadcast/naive %.3f\n",
			a.DeliveriesPerSec, a.AckedPerSec, b.DeliveriesPerSec, b.AckedPerSec, b.Ratio)
		fmt.Fprintf(tw, "push p99 ms\tbroadcast %s, naive %s\n", fmtMS(a.Extra["push_latency_p99_ms"]), fmtMS(b.Extra["push_latency_p99_ms"]))
		fmt.Fprintf(tw, "cpu µs/delivery\tbroadcast: server %s, generator %s; naive: server %s, generator %s\n",
			fmtUs(a.ServerCPUUsPerDelivery), fmtUs(a.ClientCPUUsPerDelivery), fmtUs(b.ServerCPUUsPerDelivery), fmtUs(b.ClientCPUUsPerDelivery))
		tw.Flush()
		return
	}
	fmt.Fprintf(tw, "baseline\techo: bare WebSocket round trips on this machine; %d senders, %.0f-byte frames, %d procs; %s\n",
		b.Config.Senders, b.Extra["frame_bytes"], b.Config.Procs, runs)
	fmt.Fprintf(tw, "throughput\t%s %.0f acked/s, echo %.0f round trips/s: ratio %s/echo %.3f\n",
		a.Scenario, a.AckedPerSec, b.AckedPerSec, a.Scenario, b.Ratio)
	fmt.Fprintf(tw, "latency p99 ms\t%s %s, echo %s (x%.1f)   p50 %s / %s\n",
		a.Scenario, fmtMS(a.Latency.P99), fmtMS(b.Latency.P99), b.LatencyP99Ratio, fmtMS(a.Latency.P50), fmtMS(b.Latency.P50))
	fmt.Fprintf(tw, "cpu µs/msg\t%s: server %s, generator %s; echo: server %s, generator %s\n",
		a.Scenario, fmtUs(a.ServerCPUUsPerMsg), fmtUs(a.ClientCPUUsPerMsg), fmtUs(b.ServerCPUUsPerMsg), fmtUs(b.ClientCPUUsPerMsg))
	tw.Flush()
}
