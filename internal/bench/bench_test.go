package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// workerEnv makes the test binary act as a bench worker (for Procs > 1): TestMain hands
// stdin and stdout to Work instead of running the tests.
const workerEnv = "PARLEY_BENCH_TEST_WORKER"

// echoEnv makes the test binary act as the echo scenario's server until SIGTERM.
const echoEnv = "PARLEY_BENCH_TEST_ECHO"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := Work(context.Background(), os.Stdin, os.Stdout, nil); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(serveEnv) == "1" {
		if err := testServe(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(echoEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := EchoServer(ctx, "", os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startNode runs a node in this process with rate limits off.
func startNode(t *testing.T) *parleytest.Server {
	t.Helper()
	return parleytest.Start(t, func(c *server.Config) {
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.FanoutRate = 0
		c.Gateway.ConvChangeEvery = 0
		c.Gateway.ConvCreateEvery = 0
	})
}

// runBench runs cfg against srv (nil for echo, which starts its own server) and returns the
// report and the run's error; the JSON and HTML outputs are written into a temporary
// directory and checked for shape.
func runBench(t *testing.T, srv *parleytest.Server, cfg Config, hooks *Hooks) (*Report, error) {
	t.Helper()
	dir := t.TempDir()
	if srv != nil {
		cfg.Server, cfg.AdminSecret = srv.URL, srv.AdminSecret
	}
	if cfg.JSONPath == "" {
		cfg.JSONPath = filepath.Join(dir, "report.json")
	}
	cfg.ReportPath = filepath.Join(dir, "report.html")
	cfg.DrainTimeout = min(cfg.DrainTimeout, 10*time.Second)
	var out, errOut bytes.Buffer
	opts := Options{
		Stdout: &out, Stderr: &errOut, Hooks: hooks,
		WorkerArgv: []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:  []string{workerEnv + "=1"},
		EchoArgv:   []string{os.Args[0], "-test.run=^$"},
		EchoEnv:    []string{echoEnv + "=1"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, opts)
	t.Logf("stderr:\n%s\nstdout:\n%s", errOut.String(), out.String())
	if rep == nil {
		if err == nil {
			t.Fatal("no report and no error")
		}
		return nil, err
	}
	checkOutputs(t, rep, cfg)
	return rep, err
}

// checkOutputs checks the JSON file's required fields and that the HTML report stands alone.
func checkOutputs(t *testing.T, rep *Report, cfg Config) {
	t.Helper()
	raw, err := os.ReadFile(cfg.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "acked_per_sec", "deliveries_per_sec", "latency_ms", "violations", "errors", "retries", "rate_limited", "env", "server_cpu_pct", "server_rss_bytes", "server_cpu_us_per_msg", "client_cpu_us_per_msg"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report lacks %q", k)
		}
	}
	lat, _ := m["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms lacks %q", k)
		}
	}
	if m["scenario"] != cfg.Scenario {
		t.Errorf("scenario %v, want %s", m["scenario"], cfg.Scenario)
	}
	page, err := os.ReadFile(cfg.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	checkOffline(t, html)
	if len(rep.Timeline) > 0 && (!strings.Contains(html, `id="bench_latency"`) || !strings.Contains(html, echartsJS)) {
		t.Error("HTML report has no chart")
	}
}

// consistent checks what every messaging scenario must satisfy against a correct server.
func consistent(t *testing.T, rep *Report, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if rep.Violations != 0 {
		t.Fatalf("%d violations against a correct server: %v", rep.Violations, rep.ViolationSamples)
	}
	if rep.Acked == 0 {
		t.Fatal("nothing acked")
	}
	if rep.Deliveries != rep.ExpectedDeliveries {
		t.Fatalf("deliveries %d, want acked x recipients = %d", rep.Deliveries, rep.ExpectedDeliveries)
	}
	if rep.Latency.Count == 0 || rep.Latency.P50 <= 0 || rep.Latency.Max < rep.Latency.P99 || rep.Latency.P99 < rep.Latency.P50 {
		t.Fatalf("latency percentiles inconsistent: %+v", rep.Latency)
	}
	if rep.ServerRSSBytes <= 0 {
		t.Errorf("server RSS not measured")
	}
	if rep.ClientCPUUsPerMsg <= 0 {
		t.Errorf("generator CPU per message not measured (%.3f s for %d acked)", rep.ClientCPUSeconds, rep.Acked)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("errors against a correct server: %v", rep.Errors)
	}
}

func TestDirectClosedLoop(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("direct")
	cfg.Pairs, cfg.Duration = 4, time.Second
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Deliveries != rep.Acked || rep.Echoes != rep.Acked {
		t.Fatalf("direct: deliveries %d and echoes %d, want acked %d each", rep.Deliveries, rep.Echoes, rep.Acked)
	}
	if rep.Latency.Count != rep.Acked || rep.DeliveryLatency.Count != rep.Deliveries {
		t.Fatalf("latency counts %d/%d, want %d/%d", rep.Latency.Count, rep.DeliveryLatency.Count, rep.Acked, rep.Deliveries)
	}
	if len(rep.Timeline) == 0 {
		t.Fatal("no timeline")
	}
}

// Against a server that limits sends, the SDK retries 429s silently; the report must show
// them, and say which server and machine it measured.
func TestRateLimitedServerShowsRetries(t *testing.T) {
	srv := parleytest.Start(t, func(c *server.Config) {
		c.Gateway.SendRate, c.Gateway.SendBurst = 10, 1
		c.Gateway.RequestRate = 0
		c.Version = "v9.9.9-test"
	})
	cfg := DefaultConfig("direct")
	cfg.Pairs, cfg.Messages, cfg.Duration = 1, 6, 0
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 6 {
		t.Fatalf("acked %d, want 6: every 429 is retried", rep.Acked)
	}
	if rep.Retried429 == 0 || rep.Retries < rep.Retried429 || rep.RateLimited != rep.Retried429 {
		t.Fatalf("retries %d, retried after 429 %d, 429 answers %d: want the 429s counted", rep.Retries, rep.Retried429, rep.RateLimited)
	}
	want := Env{ServerVersion: "v9.9.9-test", Engine: server.DefaultEngine}
	if rep.Env.ServerVersion != want.ServerVersion || rep.Env.Engine != want.Engine || rep.Env.ServerGo == "unknown" {
		t.Fatalf("env %+v, want the server's version %s and engine %s", rep.Env, want.ServerVersion, want.Engine)
	}
	if rep.Env.CPUs == 0 || rep.Env.Host == "" || rep.Env.GoVersion == "" {
		t.Fatalf("env %+v lacks the load tool's machine", rep.Env)
	}
	var out bytes.Buffer
	writeTable(&out, rep)
	for _, s := range []string{"429 answers: ", "engine " + want.Engine, "v9.9.9-test", "CPUs"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, out.String())
		}
	}
	if page := renderHTML(rep); !strings.Contains(page, "429 answers: ") || !strings.Contains(page, "engine "+want.Engine) {
		t.Error("HTML report lacks the retries or the engine")
	}
}

func TestDirectOpenLoopMessagesProcs(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("direct")
	cfg.Pairs, cfg.Messages, cfg.Duration, cfg.Rate, cfg.Procs = 6, 120, 0, 300, 2
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 120 || rep.Deliveries != 120 {
		t.Fatalf("acked %d, deliveries %d; want 120 each", rep.Acked, rep.Deliveries)
	}
	if rep.DurationS < 0.3 {
		t.Fatalf("120 messages at 300/s took %.2fs: the open loop did not pace", rep.DurationS)
	}
}

func TestFewerMessagesThanSenders(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("direct")
	cfg.Pairs, cfg.Messages, cfg.Duration = 5, 3, 0
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 3 {
		t.Fatalf("acked %d, want 3", rep.Acked)
	}
}

func TestGroup(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("group")
	cfg.Members, cfg.Online, cfg.Senders, cfg.Messages, cfg.Duration = 8, 5, 2, 60, 0
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 60 || rep.Deliveries != 60*4 || rep.Echoes != 60 {
		t.Fatalf("acked %d, deliveries %d, echoes %d; want 60, 240 (4 other online members), 60", rep.Acked, rep.Deliveries, rep.Echoes)
	}
	if rep.DeliveryLatency.Count != rep.Deliveries {
		t.Fatalf("delivery latency measured %d times, want %d", rep.DeliveryLatency.Count, rep.Deliveries)
	}
}

func TestReadStorm(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("read-storm")
	cfg.Members, cfg.Online, cfg.Repeat, cfg.Messages, cfg.Duration = 10, 3, 2, 5, 0
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Ops != 10*2*5 || rep.Counts["rounds"] != 5 || rep.Acked != 5 {
		t.Fatalf("reads %d, rounds %d, acked %d; want 100, 5, 5", rep.Ops, rep.Counts["rounds"], rep.Acked)
	}
	if rep.Deliveries != 5*2 { // the sender is online; the two other online members receive
		t.Fatalf("deliveries %d, want 10", rep.Deliveries)
	}
	if rep.Extra["store_commits"] <= 0 || rep.Extra["reads_per_sec"] <= 0 {
		t.Fatalf("storage writes not measured: %v", rep.Extra)
	}
}

func TestReconnect(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("reconnect")
	cfg.Devices, cfg.Convs, cfg.Messages, cfg.Rounds = 2, 3, 60, 2
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 120 || rep.Deliveries != 240 || rep.Ops != 4 {
		t.Fatalf("acked %d, deliveries %d, syncs %d; want 120, 240 (2 devices), 4", rep.Acked, rep.Deliveries, rep.Ops)
	}
	for _, k := range []string{"cursor_sync_bytes_per_device", "snapshot_sync_bytes_per_device", "snapshot_sync_p50_ms"} {
		if rep.Extra[k] <= 0 {
			t.Errorf("%s not measured: %v", k, rep.Extra)
		}
	}
	if rep.Extra["snapshot_messages_per_device"] != 90 { // 60 after round 1, 120 after round 2
		t.Errorf("snapshot devices held %v messages on average, want 90", rep.Extra["snapshot_messages_per_device"])
	}
}

func TestIdle(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("idle")
	cfg.Conns, cfg.Duration, cfg.Heartbeat = 30, 1500*time.Millisecond, 300*time.Millisecond
	rep, err := runBench(t, srv, cfg, nil)
	if err != nil || rep.Violations != 0 {
		t.Fatalf("run: %v, violations %v", err, rep.ViolationSamples)
	}
	if rep.Ops != 30 || len(rep.Errors) != 0 || rep.Extra["dropped"] != 0 {
		t.Fatalf("opened %d, errors %v, dropped %v; want 30, none, 0", rep.Ops, rep.Errors, rep.Extra["dropped"])
	}
	if rep.Counts["heartbeats"] == 0 {
		t.Error("no heartbeat sent")
	}
	if rep.Extra["server_ws_connections"] != 30 {
		t.Errorf("server counts %v connections, want 30", rep.Extra["server_ws_connections"])
	}
	for _, k := range []string{"server_rss_per_conn_bytes", "server_heap_inuse_per_conn_bytes", "server_stack_per_conn_bytes"} {
		if _, ok := rep.Extra[k]; !ok {
			t.Errorf("memory per connection not reported: no %s", k)
		}
	}
}

func TestMixed(t *testing.T) {
	srv := startNode(t)
	cfg := DefaultConfig("mixed")
	cfg.Users, cfg.Rate, cfg.Duration = 12, 300, 1500*time.Millisecond
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	for _, k := range []string{"sends", "reads", "syncs", "histories", "reconnects"} {
		if rep.Counts[k] == 0 {
			t.Errorf("no %s in the blend: %v", k, rep.Counts)
		}
	}
}

// TestInjectedFaults checks that the run notices what a faulty server or SDK would do: a
// receiver that loses one event must be reported, and the run must fail.
func TestInjectedFaults(t *testing.T) {
	// dropNth hides the n-th message event seen by the first device whose user matches.
	dropNth := func(userPart string, n int64) *Hooks {
		var seen atomic.Int64
		var victim atomic.Value
		return &Hooks{DropEvent: func(user, device string, ev client.SyncEvent) bool {
			if ev.Type != client.EventMessage || !strings.Contains(user, userPart) {
				return false
			}
			victim.CompareAndSwap(nil, device)
			return victim.Load() == device && seen.Add(1) == n
		}}
	}
	tests := []struct {
		name  string
		cfg   func() Config
		hooks *Hooks
		kinds []string // any of these must be reported
	}{
		{"direct receiver drops a middle event", func() Config {
			c := DefaultConfig("direct")
			c.Pairs, c.Messages, c.Duration = 2, 40, 0
			return c
		}, dropNth("-b", 3), []string{VCursorGap, VSeqGap}},
		{"direct receiver drops the last event", func() Config {
			c := DefaultConfig("direct")
			c.Pairs, c.Messages, c.Duration = 1, 10, 0
			return c
		}, dropNth("-b", 10), []string{VMissing}},
		{"group member drops an event", func() Config {
			c := DefaultConfig("group")
			c.Members, c.Online, c.Senders, c.Messages, c.Duration = 4, 4, 1, 20, 0
			return c
		}, dropNth("-m3", 5), []string{VCursorGap, VSeqGap}},
		{"reconnecting device drops an event", func() Config {
			c := DefaultConfig("reconnect")
			c.Devices, c.Convs, c.Messages, c.Rounds = 1, 1, 20, 1
			return c
		}, dropNth("-me", 7), []string{VCursorGap, VSeqGap}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startNode(t)
			cfg := tc.cfg()
			cfg.DrainTimeout = 2 * time.Second // a lost event is never caught up with
			rep, err := runBench(t, srv, cfg, tc.hooks)
			if err == nil {
				t.Fatal("the run succeeded despite a lost event")
			}
			if rep == nil || rep.Violations == 0 {
				t.Fatalf("no violation reported (err %v)", err)
			}
			found := false
			for _, k := range tc.kinds {
				found = found || rep.ViolationsByKind[k] > 0
			}
			if !found {
				t.Fatalf("violations %v, want one of %v", rep.ViolationsByKind, tc.kinds)
			}
		})
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_cpu_seconds_total CPU.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
process_resident_memory_bytes 2.4e+07
parley_http_requests_total{code="200"} 10
parley_http_requests_total{code="404"} 2
parley_store_commit_batch_size_bucket{le="+Inf"} 7
parley_store_commit_batch_size_sum 30
parley_store_commit_batch_size_count 7
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{mCPU: 1.5, mRSS: 2.4e7, "parley_http_requests_total": 12, mCommitSum: 30, mCommitCount: 7}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Scenario = "nope" },
		func(c *Config) { c.Server = "http://x" },
		func(c *Config) { c.Procs = 0 },
		func(c *Config) { c.Duration, c.Messages = 0, 0 },
	}
	for i, f := range bad {
		c := DefaultConfig("direct")
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: accepted %+v", i, c)
		}
	}
	idle := DefaultConfig("idle")
	idle.Conns = 30000
	if idle.Validate() == nil {
		t.Error("30,000 connections in one process accepted")
	}
	idle.Procs = 2
	if err := idle.Validate(); err != nil {
		t.Errorf("30,000 connections over 2 processes refused: %v", err)
	}
	for _, s := range Scenarios {
		if err := DefaultConfig(s).Validate(); err != nil {
			t.Errorf("default %s: %v", s, err)
		}
	}
}

func TestPresence(t *testing.T) {
	srv := parleytest.Start(t, func(c *server.Config) {
		c.Gateway.SendRate, c.Gateway.RequestRate, c.Gateway.FanoutRate = 0, 0, 0
		c.Gateway.ConvChangeEvery, c.Gateway.ConvCreateEvery = 0, 0
		c.Presence.Grace = time.Second
	})
	cfg := DefaultConfig("presence")
	cfg.Users, cfg.Subscriptions, cfg.Churn, cfg.Duration = 30, 5, 1, 6*time.Second // 3 users churn
	cfg.Grace, cfg.Offline, cfg.IdleWindow = time.Second, 2500*time.Millisecond, 2*time.Second
	rep, err := runBench(t, srv, cfg, nil)
	if err != nil || rep.Violations != 0 || len(rep.Errors) != 0 {
		t.Fatalf("run: %v, violations %v, errors %v", err, rep.ViolationSamples, rep.Errors)
	}
	if rep.Latency.Count == 0 || rep.Latency.Max < rep.Latency.P99 {
		t.Fatalf("change latency not measured: %+v", rep.Latency)
	}
	if rep.Ops != 3 || rep.Extra["failed"] != 0 || rep.Extra["dropped"] != 0 {
		t.Fatalf("churned %d, failed %v, dropped %v; want 3, 0, 0", rep.Ops, rep.Extra["failed"], rep.Extra["dropped"])
	}
	for _, k := range []string{"offline_frames", "online_frames", "max_presence_frames_per_conn_per_sec"} {
		if rep.Extra[k] <= 0 {
			t.Errorf("%s = %v: no change seen", k, rep.Extra[k])
		}
	}
	if rep.Extra["offline_before_grace"] != 0 || rep.Extra["other_changes"] != 0 {
		t.Errorf("offline before the grace %v, other changes %v; want 0, 0", rep.Extra["offline_before_grace"], rep.Extra["other_changes"])
	}
	for _, k := range []string{"presence_cpu_pct_of_core", "subscriptions_heap_per_conn_bytes"} {
		if _, ok := rep.Extra[k]; !ok {
			t.Errorf("%s not reported", k)
		}
	}
}
