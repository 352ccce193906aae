package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is everything a run measured. Its JSON form (--json) is the record to compare runs
// with; rates are per second of load, latencies in milliseconds.
type Report struct {
	Scenario string    `json:"scenario"`
	Config   configOut `json:"config"`
	Server   string    `json:"server"` // "spawned" or the URL driven
	// Topology is set when the run drove several nodes or a cluster it started: the nodes,
	// the store and bus they share, the spread of the devices.
	Topology  *Topology `json:"topology,omitempty"`
	Env       Env       `json:"env"`
	Op        string    `json:"op"` // what latency_ms measures
	StartedAt time.Time `json:"started_at"`
	DurationS float64   `json:"duration_s"` // the load phase

	Ops                int64   `json:"ops"`
	OpsPerSec          float64 `json:"ops_per_sec"`
	Acked              int64   `json:"acked"`
	AckedPerSec        float64 `json:"acked_per_sec"`
	Deliveries         int64   `json:"deliveries"` // messages received by online devices other than the sender's
	DeliveriesPerSec   float64 `json:"deliveries_per_sec"`
	ExpectedDeliveries int64   `json:"expected_deliveries"` // acked messages x their online recipients
	Echoes             int64   `json:"echoes"`              // messages received by their sender's own device

	Latency         Percentiles `json:"latency_ms"`
	DeliveryLatency Percentiles `json:"delivery_latency_ms"` // send -> receive at each recipient

	Errors map[string]int64 `json:"errors"`
	// Retries counts the sends the SDK silently repeated (after a 429, a 5xx, a lost
	// connection); Retried429 those after a 429. RateLimited is every 429 answer: the
	// retried ones plus those reported under Errors["429"].
	Retries          int64            `json:"retries"`
	Retried429       int64            `json:"retried_429"`
	RateLimited      int64            `json:"rate_limited"`
	Violations       int64            `json:"violations"`
	ViolationsByKind map[string]int64 `json:"violations_by_kind"`
	ViolationSamples []Violation      `json:"violation_samples"`

	ServerCPUPct        float64            `json:"server_cpu_pct"`
	ServerCPUSeconds    float64            `json:"server_cpu_seconds"`
	ServerRSSBytes      float64            `json:"server_rss_bytes"` // peak sampled during the load
	ServerRSSStartBytes float64            `json:"server_rss_start_bytes"`
	ServerCounters      map[string]float64 `json:"server_counters"` // parley_* counters over the load

	ClientCPUPct      float64 `json:"client_cpu_pct"`
	ClientCPUSeconds  float64 `json:"client_cpu_seconds"`   // the load generator's processes, user + system
	ClientMaxRSSBytes int64   `json:"client_max_rss_bytes"` // largest load process

	// CPU per message: each side's CPU seconds over the load divided by the messages acked
	// (round trips for echo), in microseconds; 0 when nothing was acked. The generator
	// shares the machine with the server, so every microsecond it spends is one the server
	// could not: its figure says how far the server's is a measure of the server alone.
	// Where a message has several recipients (groups), the same per delivery as well.
	ServerCPUUsPerMsg      float64 `json:"server_cpu_us_per_msg"`
	ClientCPUUsPerMsg      float64 `json:"client_cpu_us_per_msg"`
	ServerCPUUsPerDelivery float64 `json:"server_cpu_us_per_delivery,omitempty"`
	ClientCPUUsPerDelivery float64 `json:"client_cpu_us_per_delivery,omitempty"`

	Counts   map[string]int64   `json:"counts"` // scenario counters (rounds, reconnects, ...)
	Extra    map[string]float64 `json:"extra"`  // scenario figures
	Timeline []Point            `json:"timeline"`

	// With --runs > 1: the runs, each a report of its own; the figures above are then their
	// medians (violations and errors their sums) and Spread holds median, min and max of the
	// headline figures. The timeline is that of the median run (MedianRun, from 1).
	Runs      []*Report         `json:"runs,omitempty"`
	Spread    map[string]Spread `json:"spread,omitempty"`
	MedianRun int               `json:"median_run,omitempty"`
	// With --baseline: the echo runs of the same invocation and the ratios against them.
	Baseline *Baseline `json:"baseline,omitempty"`

	lat, dlat *hdrhistogram.Histogram
	named     map[string]*hdrhistogram.Histogram // the workers' Named, merged
	maxes     map[string]int64                   // the workers' Maxes, merged
	slots     map[int]*mergedSlot
	interval  time.Duration
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// Point is one time slot of the run.
type Point struct {
	T                float64 `json:"t"` // seconds from the start to the slot's end
	OpsPerSec        float64 `json:"ops_per_sec"`
	AckedPerSec      float64 `json:"acked_per_sec"`
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	P50              float64 `json:"p50_ms"`
	P99              float64 `json:"p99_ms"`
	Max              float64 `json:"max_ms"`
	DeliveryP99      float64 `json:"delivery_p99_ms"`
	ServerCPUPct     float64 `json:"server_cpu_pct"`
	ServerRSSBytes   float64 `json:"server_rss_bytes"`
}

type mergedSlot struct {
	ops, acked, delivered int64
	lat, dlat             *hdrhistogram.Histogram
}

// configOut is the run's configuration as reported.
type configOut struct {
	Procs    int     `json:"procs"`
	Pairs    int     `json:"pairs,omitempty"`
	Members  int     `json:"members,omitempty"`
	Online   int     `json:"online,omitempty"`
	Senders  int     `json:"senders,omitempty"`
	Users    int     `json:"users,omitempty"`
	Devices  int     `json:"devices,omitempty"`
	Convs    int     `json:"convs,omitempty"`
	Conns    int     `json:"conns,omitempty"`
	Messages int64   `json:"messages,omitempty"`
	Duration string  `json:"duration,omitempty"`
	Rate     float64 `json:"rate,omitempty"`
	Size     int     `json:"size"`
	Repeat   int     `json:"repeat,omitempty"`
	Open     int     `json:"open,omitempty"`
	Window   int     `json:"window,omitempty"`
	Direct   bool    `json:"compare_direct,omitempty"`
	Rounds   int     `json:"rounds,omitempty"`
	// presence
	Subscriptions int     `json:"subscriptions,omitempty"`
	Churn         float64 `json:"churn_per_min,omitempty"`
	Offline       string  `json:"offline,omitempty"`
	Grace         string  `json:"grace,omitempty"`
	Runs          int     `json:"runs,omitempty"`
}

func (c *coord) configOut() configOut {
	cfg := c.cfg
	o := configOut{Procs: cfg.Procs, Messages: cfg.Messages, Rate: cfg.Rate, Size: cfg.Size}
	if cfg.Duration > 0 {
		o.Duration = cfg.Duration.String()
	}
	switch cfg.Scenario {
	case "direct":
		o.Pairs = cfg.Pairs
	case "group":
		o.Members, o.Online, o.Senders = cfg.Members, cfg.Online, cfg.Senders
	case "read-storm":
		o.Members, o.Online, o.Repeat = cfg.Members, cfg.Online, cfg.Repeat
	case "reconnect":
		o.Devices, o.Convs, o.Rounds = cfg.Devices, cfg.Convs, cfg.Rounds
	case "idle":
		o.Conns = cfg.Conns
	case "mixed":
		o.Users = cfg.Users
	case "presence":
		o.Users, o.Subscriptions, o.Churn = cfg.Users, cfg.Subscriptions, cfg.Churn
		o.Offline, o.Grace = cfg.Offline.String(), cfg.Grace.String()
	case "echo":
		o.Senders = cfg.Senders
	case "largegroup":
		o.Members, o.Online, o.Open, o.Senders, o.Direct = cfg.Members, cfg.Online, cfg.Open, cfg.Senders, cfg.CompareDirect
	case "readstorm":
		o.Members, o.Online = cfg.Members, cfg.Online
	case "broadcast", "broadcast-naive":
		o.Members, o.Window = cfg.Members, cfg.Window
	}
	o.Runs = cfg.Runs
	return o
}

// addResult merges one worker's result.
func (r *Report) addResult(res *Result) {
	r.Ops += res.Ops
	r.Acked += res.Acked
	r.Deliveries += res.Delivered
	r.Echoes += res.Echoes
	r.Retries += res.Retries
	r.Retried429 += res.Retried429
	for k, v := range res.Errors {
		r.Errors[k] += v
	}
	for k, v := range res.Counts {
		r.Counts[k] += v
	}
	mergeHist(r.lat, res.Latency)
	mergeHist(r.dlat, res.DLatency)
	for k, b := range res.Named {
		if r.named == nil {
			r.named = map[string]*hdrhistogram.Histogram{}
		}
		if r.named[k] == nil {
			r.named[k] = newHist(3)
		}
		mergeHist(r.named[k], b)
	}
	for k, v := range res.Maxes {
		if r.maxes == nil {
			r.maxes = map[string]int64{}
		}
		if old, ok := r.maxes[k]; !ok || v > old {
			r.maxes[k] = v
		}
	}
	if r.slots == nil {
		r.slots = map[int]*mergedSlot{}
	}
	for _, s := range res.Slots {
		m := r.slots[s.Index]
		if m == nil {
			m = &mergedSlot{lat: newHist(2), dlat: newHist(2)}
			r.slots[s.Index] = m
		}
		m.ops += s.Ops
		m.acked += s.Acked
		m.delivered += s.Delivered
		mergeHist(m.lat, s.Lat)
		mergeHist(m.dlat, s.DLat)
	}
	r.ClientCPUSeconds += res.CPUSeconds
	r.ClientMaxRSSBytes = max(r.ClientMaxRSSBytes, res.MaxRSS)
	r.finalize()
}

// finalize derives rates, percentiles and the timeline from what was merged.
func (r *Report) finalize() {
	if r.DurationS > 0 {
		r.OpsPerSec = float64(r.Ops) / r.DurationS
		r.AckedPerSec = float64(r.Acked) / r.DurationS
		r.DeliveriesPerSec = float64(r.Deliveries) / r.DurationS
	}
	r.Latency, r.DeliveryLatency = percentiles(r.lat), percentiles(r.dlat)
	r.RateLimited = r.Retried429 + r.Errors["429"]
	r.Timeline = r.Timeline[:0]
	iv := r.interval.Seconds()
	last := -1
	for i := range r.slots {
		last = max(last, i)
	}
	// The load phase ends inside slot n-1; later slots belong to the drain.
	n := min(last+1, int(math.Ceil(r.DurationS/iv)))
	for i := 0; i < n; i++ {
		from, to := float64(i)*iv, min(float64(i+1)*iv, r.DurationS)
		s := r.slots[i]
		if i == n-2 && r.DurationS-to < iv/2 {
			// A last slot shorter than half an interval would show a rate from a sliver
			// of time: fold it into this one.
			s = foldSlots(s, r.slots[i+1])
			to, n = r.DurationS, n-1
		}
		p := Point{T: to}
		if s != nil && to > from {
			width := to - from
			p.OpsPerSec, p.AckedPerSec, p.DeliveriesPerSec = float64(s.ops)/width, float64(s.acked)/width, float64(s.delivered)/width
			lp, dp := percentiles(s.lat), percentiles(s.dlat)
			p.P50, p.P99, p.Max, p.DeliveryP99 = lp.P50, lp.P99, lp.Max, dp.P99
		}
		r.Timeline = append(r.Timeline, p)
	}
}

// foldSlots returns a slot holding both a and b (either may be nil).
func foldSlots(a, b *mergedSlot) *mergedSlot {
	out := &mergedSlot{lat: newHist(2), dlat: newHist(2)}
	for _, s := range []*mergedSlot{a, b} {
		if s == nil {
			continue
		}
		out.ops += s.ops
		out.acked += s.acked
		out.delivered += s.delivered
		out.lat.Merge(s.lat)
		out.dlat.Merge(s.dlat)
	}
	return out
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h == nil || h.TotalCount() == 0 {
		return Percentiles{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Percentiles{
		Count: h.TotalCount(), Mean: h.Mean() / 1000,
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()),
	}
}

// verdict completes the report with the violations found and the client's CPU share.
func (c *coord) verdict(r *Report) {
	r.Violations, r.ViolationsByKind, r.ViolationSamples = c.v.Summary()
	if r.ViolationSamples == nil {
		r.ViolationSamples = []Violation{}
	}
	if r.DurationS > 0 {
		r.ClientCPUPct = 100 * r.ClientCPUSeconds / r.DurationS
	}
	r.cpuPerMessage()
}

// cpuPerMessage fills the CPU figures per message and per delivery.
func (r *Report) cpuPerMessage() {
	per := func(seconds float64, n int64) float64 {
		if n <= 0 {
			return 0
		}
		return 1e6 * seconds / float64(n)
	}
	r.ServerCPUUsPerMsg, r.ClientCPUUsPerMsg = per(r.ServerCPUSeconds, r.Acked), per(r.ClientCPUSeconds, r.Acked)
	if r.Deliveries > r.Acked {
		r.ServerCPUUsPerDelivery, r.ClientCPUUsPerDelivery = per(r.ServerCPUSeconds, r.Deliveries), per(r.ClientCPUSeconds, r.Deliveries)
	}
}

// fmtCPUPerMsg puts the server's and the generator's CPU per message side by side.
func fmtCPUPerMsg(r *Report) string {
	if r.Acked == 0 {
		return "-"
	}
	s := fmt.Sprintf("server %s µs, generator %s µs per acked message", fmtUs(r.ServerCPUUsPerMsg), fmtUs(r.ClientCPUUsPerMsg))
	if r.ServerCPUUsPerDelivery > 0 || r.ClientCPUUsPerDelivery > 0 {
		s += fmt.Sprintf("; %s µs, %s µs per delivery", fmtUs(r.ServerCPUUsPerDelivery), fmtUs(r.ClientCPUUsPerDelivery))
	}
	return s
}

func fmtUs(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// writeFiles writes the JSON and HTML files cfg asks for.
func writeFiles(cfg Config, r *Report) error {
	if cfg.JSONPath != "" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.JSONPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if cfg.ReportPath != "" {
		if err := os.WriteFile(cfg.ReportPath, []byte(renderHTML(r)), 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}

// fmtRetries says how often the SDK repeated sends and how many 429s the server answered,
// which the SDK's silent retries would otherwise hide.
func fmtRetries(r *Report) string {
	return fmt.Sprintf("%d sends retried (%d after a 429); 429 answers: %d", r.Retries, r.Retried429, r.RateLimited)
}

func fmtEnvServer(e Env) string {
	s := fmt.Sprintf("parley %s, engine %s, %s", e.ServerVersion, e.Engine, e.ServerGo)
	if len(e.ServerArgs) > 0 {
		s += fmt.Sprintf(", args %q", e.ServerArgs)
	}
	return s
}

func fmtEnvBench(e Env) string {
	return fmt.Sprintf("parley %s, %s, %s, host %s, %d CPUs", e.BenchVersion, e.GoVersion, e.OSArch, e.Host, e.CPUs)
}

func fmtLat(p Percentiles) string {
	if p.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (n=%d)",
		fmtMS(p.P50), fmtMS(p.P90), fmtMS(p.P99), fmtMS(p.P999), fmtMS(p.Max), p.Count)
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

func fmtCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writeTable prints the final table.
func writeTable(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	cfg, _ := json.Marshal(r.Config)
	row("scenario", "%s  %s", r.Scenario, cfg)
	row("server", "%s  %s", r.Server, fmtEnvServer(r.Env))
	if r.Topology != nil {
		row("topology", "%s", r.Topology)
	}
	row("bench", "%s", fmtEnvBench(r.Env))
	row("load time", "%.2f s", r.DurationS)
	row("operations", "%d  (%.0f/s)  %s", r.Ops, r.OpsPerSec, r.Op)
	row("acked", "%d  (%.0f/s)", r.Acked, r.AckedPerSec)
	row("deliveries", "%d  (%.0f/s)  expected %d, echoes %d", r.Deliveries, r.DeliveriesPerSec, r.ExpectedDeliveries, r.Echoes)
	row("latency ms", "%s  [%s]", fmtLat(r.Latency), r.Op)
	row("delivery ms", "%s  [send -> receive]", fmtLat(r.DeliveryLatency))
	row("errors", "%s", fmtCounts(r.Errors))
	row("retries", "%s", fmtRetries(r))
	row("violations", "%d  %s", r.Violations, fmtCounts(r.ViolationsByKind))
	row("server", "cpu %.0f%% (%.1f s)  rss peak %s (start %s)", r.ServerCPUPct, r.ServerCPUSeconds, fmtBytes(r.ServerRSSBytes), fmtBytes(r.ServerRSSStartBytes))
	row("client", "cpu %.0f%% (%.1f s)  max rss %s  procs %d", r.ClientCPUPct, r.ClientCPUSeconds, fmtBytes(float64(r.ClientMaxRSSBytes)), r.Config.Procs)
	row("cpu per msg", "%s", fmtCPUPerMsg(r))
	if len(r.Counts) > 0 {
		row("counts", "%s", fmtCounts(r.Counts))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		v := r.Extra[k]
		switch {
		case strings.HasSuffix(k, "_bytes"):
			row(k, "%s", fmtBytes(v))
		case v == float64(int64(v)):
			row(k, "%d", int64(v))
		default:
			row(k, "%.3f", v)
		}
	}
	tw.Flush()
	for _, v := range r.ViolationSamples {
		fmt.Fprintf(w, "  violation: %s\n", v)
	}
}
