package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// serveEnv makes the test binary act as `parley serve` for the nodes of --cluster (see
// testServe): TestMain runs the node instead of the tests.
const serveEnv = "PARLEY_BENCH_TEST_SERVE"

// testServe is the part of `parley serve` that the bench's nodes use: the flags the bench
// passes (startNode, startCluster), a node of package server, its address announced as
// serve announces it, and a drain on SIGTERM.
func testServe(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.String("test.run", "", "the test binary's own flag, ignored")
	fs.String("log-level", "", "ignored: the node logs nothing")
	addr := fs.String("addr", "127.0.0.1:0", "")
	cfg := server.DefaultConfig("")
	fs.StringVar(&cfg.Data, "data", "", "")
	fs.StringVar(&cfg.AdminSecret, "admin-secret", "", "")
	fs.StringVar(&cfg.Engine, "store", "", "")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", "", "")
	fs.StringVar(&cfg.BlobStore, "blob-store", "", "")
	g := &cfg.Gateway
	for name, p := range map[string]*float64{"send-rate": &g.SendRate, "request-rate": &g.RequestRate, "fanout-rate": &g.FanoutRate, "history-rate": &g.HistoryRate} {
		fs.Float64Var(p, name, *p, "")
	}
	fs.DurationVar(&g.ConvChangeEvery, "conv-change-every", g.ConvChangeEvery, "")
	fs.DurationVar(&g.ConvCreateEvery, "conv-create-every", g.ConvCreateEvery, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	fmt.Printf("parley test listening on http://%s\n", ln.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

func TestParseServers(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "http://127.0.0.1:8080", want: []string{"http://127.0.0.1:8080"}},
		{in: "http://a:1/, https://b:2 ,,http://c:3", want: []string{"http://a:1", "https://b:2", "http://c:3"}},
		{in: "", bad: true},
		{in: " , ", bad: true},
		{in: "127.0.0.1:8080", bad: true},
		{in: "http://a:1,ftp://b", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseServers(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("accepted: %v", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// spreadNodes returns the nodes a spreader with seed deals to n accounts, in two batches as the
// setups mint tokens.
func spreadNodes(seed uint64, nodes, n int) ([]int, []int) {
	s := newSpreader(seed, nodes)
	accts := make([]Account, n)
	s.assign(accts[:n/2])
	s.assign(accts[n/2:])
	out := make([]int, n)
	for i, a := range accts {
		out[i] = a.Node
	}
	return out, s.perNode()
}

func TestSpreadIsSeeded(t *testing.T) {
	a, counts := spreadNodes(42, 3, 300)
	b, _ := spreadNodes(42, 3, 300)
	if !slices.Equal(a, b) {
		t.Fatal("one seed spread the devices two ways")
	}
	c, _ := spreadNodes(43, 3, 300)
	if slices.Equal(a, c) {
		t.Fatal("two seeds spread the devices alike")
	}
	sum := 0
	for i, n := range counts {
		if n < 60 { // 100 expected per node
			t.Errorf("node %d got %d of 300 devices", i, n)
		}
		sum += n
	}
	if sum != 300 {
		t.Errorf("counts %v add up to %d, want 300", counts, sum)
	}
	// A direct pair is two devices in a row: most pairs span two nodes.
	split := 0
	for i := 0; i < len(a); i += 2 {
		if a[i] != a[i+1] {
			split++
		}
	}
	if split < 75 { // two thirds of 150 expected
		t.Errorf("only %d of 150 pairs span two nodes", split)
	}
	one, counts := spreadNodes(42, 1, 10)
	if slices.Max(one) != 0 || counts[0] != 10 {
		t.Errorf("one node: nodes %v, counts %v", one, counts)
	}
}

func TestValidateCluster(t *testing.T) {
	tests := []struct {
		name string
		f    func(*Config)
		ok   bool
	}{
		{"cluster", func(c *Config) { c.Cluster = 3 }, true},
		{"server list", func(c *Config) { c.Server, c.AdminSecret = "http://a:1,http://b:2", "s" }, true},
		{"bad server list", func(c *Config) { c.Server, c.AdminSecret = "http://a:1,b:2", "s" }, false},
		{"cluster and server", func(c *Config) { c.Cluster, c.Server, c.AdminSecret = 2, "http://a:1", "s" }, false},
		{"cluster without database", func(c *Config) { c.Cluster, c.PostgresURL = 2, "" }, false},
		{"negative cluster", func(c *Config) { c.Cluster = -1 }, false},
		{"kill", func(c *Config) { c.Cluster, c.KillNodeAfter = 3, 5*time.Second }, true},
		{"kill one node", func(c *Config) { c.Cluster, c.KillNodeAfter = 1, 5*time.Second }, false},
		{"kill without cluster", func(c *Config) { c.KillNodeAfter = 5 * time.Second }, false},
		{"kill after the load", func(c *Config) { c.Cluster, c.KillNodeAfter = 2, 10*time.Second }, false},
		{"kill with messages", func(c *Config) { c.Cluster, c.KillNodeAfter, c.Messages = 2, time.Second, 100 }, false},
		{"kill in group", func(c *Config) {
			*c = DefaultConfig("group")
			c.PostgresURL, c.Cluster, c.KillNodeAfter = DefaultPostgresURL, 2, time.Second
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig("direct")
			c.PostgresURL = DefaultPostgresURL
			tc.f(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestStatTicks(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
	line := "123 (postgres: bench (x) idle) S 1 123 123 0 -1 4194560 10 0 0 0 250 50 7 3 20 0 1 0 100 1000 10"
	if got, ok := statTicks(line); !ok || got != 310 {
		t.Fatalf("statTicks = %d, %v; want 310", got, ok)
	}
	if _, ok := statTicks("garbage"); ok {
		t.Fatal("statTicks accepted garbage")
	}
}

func TestLocalNATS(t *testing.T) {
	for list, want := range map[string]bool{
		"nats://127.0.0.1:4222":                      true,
		"nats://localhost:4222, nats://[::1]:4223":   true,
		"nats://127.0.0.1:4222,nats://10.0.0.3:4222": false,
		"nats://nats.example.com:4222":               false,
	} {
		if got := localNATS(list); got != want {
			t.Errorf("localNATS(%q) = %v, want %v", list, got, want)
		}
	}
}

func TestWithSearchPath(t *testing.T) {
	got, err := withSearchPath("postgres://u@h:5432/db?sslmode=disable", "bench_x")
	if err != nil || !strings.Contains(got, "search_path=bench_x") || !strings.Contains(got, "sslmode=disable") {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestCluster runs direct on two nodes the bench starts on the machine's PostgreSQL (the
// test binary acting as `parley serve`), once plainly and once killing a node mid-load:
// every acked message is delivered exactly once, the topology is reported, the killed
// node's clients catch up on the other node, and the schema is gone afterwards.
func TestCluster(t *testing.T) {
	dbURL := pgtest.URL(t)
	tests := []struct {
		name string
		kill time.Duration
	}{
		{"plain", 0},
		{"kill a node", 1200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig("direct")
			cfg.Pairs, cfg.Duration, cfg.Seed = 4, 2500*time.Millisecond, 7
			cfg.Cluster, cfg.PostgresURL, cfg.KillNodeAfter = 2, dbURL, tc.kill
			rep, err := runCluster(t, cfg)
			consistent(t, rep, err)
			top := rep.Topology
			if top == nil || len(top.Nodes) != 2 || top.Store != "postgres" || top.Seed != 7 {
				t.Fatalf("topology %+v", top)
			}
			if top.DevicesPerNode[0]+top.DevicesPerNode[1] != 8 || top.DevicesPerNode[1] == 0 {
				t.Fatalf("devices per node %v: want 8 over both nodes (seed 7)", top.DevicesPerNode)
			}
			if _, ok := rep.Extra["pg_commits_per_msg"]; !ok {
				t.Errorf("no pg commits per message: %v", rep.Extra)
			}
			if schemaExists(t, dbURL, top.Schema) {
				t.Errorf("schema %s left behind", top.Schema)
			}
			if tc.kill == 0 {
				return
			}
			victims := int64(top.DevicesPerNode[1])
			if top.KilledNode == nil || *top.KilledNode != 1 {
				t.Fatalf("killed node %v, want 1", top.KilledNode)
			}
			if rep.Counts["killnode_devices"] != victims || rep.Counts["killnode_caught_up"] != victims || rep.Counts["failovers"] != victims {
				t.Fatalf("counts %v: want the %d devices of node 1 moved and caught up", rep.Counts, victims)
			}
			if rep.Extra["killnode_catchup_max_ms"] <= 0 {
				t.Fatalf("catch-up time not reported: %v", rep.Extra)
			}
		})
	}
}

// runCluster runs cfg, whose nodes are this test binary (serveEnv).
func runCluster(t *testing.T, cfg Config) (*Report, error) {
	t.Helper()
	cfg.JSONPath = t.TempDir() + "/report.json"
	var out, errOut strings.Builder
	opts := Options{
		Stdout: &out, Stderr: &syncWriter{w: &errOut},
		ServerArgv: []string{os.Args[0], "-test.run=^$"},
		ServerEnv:  []string{serveEnv + "=1"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, opts)
	t.Logf("stderr:\n%s\nstdout:\n%s", errOut.String(), out.String())
	if rep == nil && err == nil {
		t.Fatal("no report and no error")
	}
	return rep, err
}

func schemaExists(t *testing.T, dbURL, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A kill interrupts the sends under way: a device is caught up only once they have ended,
// and then up to the seqs they were given as well.
func TestSendLogAfterKill(t *testing.T) {
	var l sendLog
	t0 := time.Now()
	before := l.begin(t0)
	done := l.begin(t0)
	l.end(done, "c", client.MessageAck{Seq: 3}, nil)
	l.killed(t0.Add(time.Millisecond))
	after := l.begin(t0.Add(2 * time.Millisecond))
	base := map[string]int64{"c": 4, "d": 2}
	if _, ok := l.targets(base); ok {
		t.Fatal("caught up with a send interrupted by the kill still under way")
	}
	l.end(before, "d", client.MessageAck{Seq: 9}, nil)
	got, ok := l.targets(base)
	if !ok || got["c"] != 4 || got["d"] != 9 {
		t.Fatalf("targets %v, %v; want c 4, d 9 (the interrupted send's seq) with the later send still under way", got, ok)
	}
	l.end(after, "c", client.MessageAck{Seq: 10}, nil)
	if got, _ := l.targets(base); got["c"] != 4 {
		t.Fatalf("a send started after the kill raised the target to %d", got["c"])
	}
}

func TestNextLiveNode(t *testing.T) {
	h := &nodeHealth{dead: []bool{false, false, true, false}}
	for from, want := range map[int]int{0: 1, 1: 3, 2: 3, 3: 0} {
		if got := h.next(from); got != want {
			t.Errorf("next(%d) = %d, want %d", from, got, want)
		}
	}
	h.dead = []bool{true, false}
	if got := h.next(1); got != 1 {
		t.Errorf("next(1) with no other live node = %d, want 1", got)
	}
}
