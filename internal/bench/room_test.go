package bench

import (
	"context"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

func TestAnalyseNotices(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sent := func(seqs ...int64) []SentAt {
		var out []SentAt
		for i, s := range seqs {
			out = append(out, SentAt{Seq: s, At: at(i * 50).UnixNano()}) // 20 msgs/s
		}
		return out
	}
	tests := []struct {
		name      string
		notices   []noticeAt
		sent      []SentAt
		latencies []time.Duration
		missed    int
		tooMany   bool
	}{
		{"one notice covers a burst", []noticeAt{{3, at(400)}}, sent(1, 2, 3),
			[]time.Duration{400 * time.Millisecond, 350 * time.Millisecond, 300 * time.Millisecond}, 0, false},
		{"a later notice covers the rest", []noticeAt{{1, at(10)}, {3, at(1010)}}, sent(1, 2, 3),
			[]time.Duration{10 * time.Millisecond, 960 * time.Millisecond, 910 * time.Millisecond}, 0, false},
		{"a stale notice covers nothing new", []noticeAt{{2, at(100)}, {1, at(1100)}, {3, at(2100)}}, sent(1, 2, 3),
			[]time.Duration{100 * time.Millisecond, 50 * time.Millisecond, 2000 * time.Millisecond}, 0, false},
		{"the last message never notified", []noticeAt{{2, at(100)}}, sent(1, 2, 3),
			[]time.Duration{100 * time.Millisecond, 50 * time.Millisecond}, 1, false},
		{"no notice at all", nil, sent(1, 2), nil, 2, false},
		{"a notice before its message was sent counts as 0", []noticeAt{{1, at(-5)}}, sent(1), []time.Duration{0}, 0, false},
		{"five notices in a second are too many", []noticeAt{{1, at(0)}, {2, at(100)}, {3, at(200)}, {4, at(300)}, {5, at(400)}}, sent(1, 2, 3, 4, 5),
			[]time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := analyseNotices(tc.notices, tc.sent)
			if len(f.latencies) != len(tc.latencies) {
				t.Fatalf("latencies %v, want %v", f.latencies, tc.latencies)
			}
			for i := range f.latencies {
				if f.latencies[i] != tc.latencies[i] {
					t.Fatalf("latencies %v, want %v", f.latencies, tc.latencies)
				}
			}
			if f.missed != tc.missed || f.tooMany != tc.tooMany {
				t.Fatalf("missed %d, too many %v; want %d, %v", f.missed, f.tooMany, tc.missed, tc.tooMany)
			}
			if len(tc.notices) >= 2 && len(f.gaps) != len(tc.notices)-1 {
				t.Fatalf("gaps %v for %d notices", f.gaps, len(tc.notices))
			}
		})
	}
}

func TestWithinRate(t *testing.T) {
	tests := []struct {
		n    int
		span time.Duration
		ok   bool
	}{
		{0, 0, true}, {1, 0, true}, {2, 0, true}, // two may arrive together (the first queued)
		{4, 0, true}, {5, 0, false}, // three seconds of queueing, not four
		{11, 10 * time.Second, true},
		{11, 7 * time.Second, true},
		{11, 6900 * time.Millisecond, false},
		{31, 28900 * time.Millisecond, true}, // seen on a loaded machine: 31 notices in 28.9 s
		{21, 2 * time.Second, false},         // one notice per message at 10 msgs/s
	}
	for _, tc := range tests {
		if got := withinRate(tc.n, tc.span); got != tc.ok {
			t.Errorf("withinRate(%d, %v) = %v, want %v", tc.n, tc.span, got, tc.ok)
		}
	}
}

func TestNoticeRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ns []noticeAt
	for i := range 11 {
		ns = append(ns, noticeAt{int64(20 * (i + 1)), t0.Add(time.Duration(i) * time.Second)})
	}
	f := analyseNotices(ns, nil)
	if f.rate != 1 || f.tooMany {
		t.Fatalf("11 notices a second apart: rate %v, too many %v; want 1, false", f.rate, f.tooMany)
	}
}

func TestMergeAndSortTimes(t *testing.T) {
	a := map[string][]SentAt{"g": {{Seq: 3, At: 30}, {Seq: 1, At: 10}}}
	b := map[string][]SentAt{"g": {{Seq: 2, At: 20}}, "d": {{Seq: 1, At: 5}}}
	m := mergeTimes(a, nil, b)
	got := sortedTimes(m, "g")
	if len(got) != 3 || got[0].Seq != 1 || got[1].Seq != 2 || got[2].Seq != 3 || len(m["d"]) != 1 {
		t.Fatalf("merged %v, sorted g %v", m, got)
	}
}

func TestDeliveryTracker(t *testing.T) {
	a, b := &roomConn{}, &roomConn{}
	tr := newDeliveryTracker(2)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if !tr.wait(ctx, 0) {
		t.Fatal("seq 0 is held by everyone from the start")
	}
	tr.got(a, 1)
	tr.got(a, 2)
	tr.got(b, 1)
	if tr.full != 1 {
		t.Fatalf("full %d, want 1: b has not got seq 2", tr.full)
	}
	done := make(chan bool, 1)
	go func() { done <- tr.wait(context.Background(), 3) }()
	tr.got(b, 3) // b skipped 2 (a violation of its own): it must not stall the sender
	tr.got(a, 3)
	select {
	case ok := <-done:
		if !ok || tr.full != 3 {
			t.Fatalf("wait returned %v with full %d, want true, 3", ok, tr.full)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sender was not woken")
	}
	if tr.wait(ctx, 4) {
		t.Fatal("wait for a seq nobody has returned true")
	}
}

// TestBroadcastNaive runs broadcast's baseline at a small scale: every connection must get
// every frame once, in order, and the sender's window must pace it.
func TestBroadcastNaive(t *testing.T) {
	cfg := DefaultConfig("broadcast-naive")
	cfg.Members, cfg.Window, cfg.Messages, cfg.Duration = 20, 4, 200, 0
	rep, err := runBench(t, nil, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 200 || rep.Deliveries != 200*19 || rep.Echoes != 200 {
		t.Fatalf("acked %d, deliveries %d, echoes %d; want 200, 3800, 200", rep.Acked, rep.Deliveries, rep.Echoes)
	}
	if rep.Extra["push_latency_count"] != 200*19 {
		t.Fatalf("push latency measured %v times, want 3800", rep.Extra["push_latency_count"])
	}
}

// startReadFanoutNode runs a node in this process whose groups of more than 10 members are
// in read fanout, so that the large-group scenarios run at a small scale.
func startReadFanoutNode(t *testing.T) *parleytest.Server {
	t.Helper()
	return parleytest.Start(t, func(c *server.Config) {
		c.Gateway.SendRate, c.Gateway.RequestRate, c.Gateway.FanoutRate = 0, 0, 0
		c.Gateway.ConvChangeEvery, c.Gateway.ConvCreateEvery, c.Gateway.HistoryRate = 0, 0, 0
		c.Chat.WriteFanoutMax = 10
	})
}

func TestLargeGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds: notices come once a second")
	}
	srv := startReadFanoutNode(t)
	cfg := DefaultConfig("largegroup")
	// One sender: with two, the first server drops a group's first message when the second
	// one reaches its hub first (hub.room.deliver starts at the first seq it sees), which
	// the run reports as a seq_gap on every open connection.
	cfg.Members, cfg.Online, cfg.Open, cfg.Senders, cfg.Rate, cfg.Duration, cfg.Procs = 50, 20, 5, 1, 20, 2*time.Second, 2
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	group := rep.Latency.Count // acks of group sends; the direct ones are apart
	if d := rep.Extra["direct_ack_count"]; group == 0 || d < float64(group)-1 || d > float64(group)+1 {
		t.Fatalf("group acks %d, direct acks %v: want as many (the sender sends into both at one rate)", group, d)
	}
	// Every open connection but the sender's gets each group message pushed; the peer gets
	// each direct message as an event.
	if want := float64(group * (5 - 1)); rep.Extra["push_latency_count"] != want {
		t.Fatalf("pushes measured %v, want %v", rep.Extra["push_latency_count"], want)
	}
	notified := int64(20 - 5) // online without the group open
	if rep.Counts["notice_expected"] != notified*group || rep.Counts["notice_missed"] != 0 {
		t.Fatalf("notices expected %d (want %d), missed %d", rep.Counts["notice_expected"], notified*group, rep.Counts["notice_missed"])
	}
	if rep.Extra["notice_latency_count"] != float64(notified*group) || rep.Extra["notice_within_1500ms_fraction"] <= 0 {
		t.Fatalf("notice figures %v", rep.Extra)
	}
	if rep.Extra["dropped"] != 0 || rep.Extra["notices_per_conn_per_sec_max"] > 1.5 {
		t.Fatalf("dropped %v, notices per connection per second up to %v", rep.Extra["dropped"], rep.Extra["notices_per_conn_per_sec_max"])
	}
	for _, k := range []string{"group_over_direct_ack_p99", "setup_members_s", "send_ack_p99_ms"} {
		if rep.Extra[k] <= 0 {
			t.Errorf("%s not measured: %v", k, rep.Extra)
		}
	}
}

func TestReadstorm(t *testing.T) {
	srv := startReadFanoutNode(t)
	cfg := DefaultConfig("readstorm")
	cfg.Members, cfg.Online, cfg.Duration = 50, 20, 3*time.Second // the storm, then the final count
	rep, err := runBench(t, srv, cfg, nil)
	if rep == nil {
		t.Fatalf("run: %v", err)
	}
	if rep.Ops != 20 || len(rep.Errors) != 0 {
		t.Fatalf("reads %d, errors %v; want 20, none", rep.Ops, rep.Errors)
	}
	if rep.Extra["store_commits"] <= 0 || rep.Extra["commits_per_read"] <= 0 {
		t.Fatalf("figures %v: want the commits counted", rep.Extra)
	}
	if rep.Counts["receipts_pushes"] == 0 {
		t.Errorf("the server pushed no receipts to the sender: %v", rep.ViolationSamples)
	}
	if err != nil || rep.Violations != 0 {
		t.Fatalf("run: %v, violations %v", err, rep.ViolationSamples)
	}
	if rep.Extra["receipts_final_count"] != 20 || rep.Extra["receipts_final_ms"] <= 0 {
		t.Fatalf("figures %v: want the final count (20) pushed", rep.Extra)
	}
}

func TestBroadcast(t *testing.T) {
	srv := startReadFanoutNode(t)
	cfg := DefaultConfig("broadcast")
	cfg.Members, cfg.Window, cfg.Messages, cfg.Duration = 30, 4, 100, 0
	rep, err := runBench(t, srv, cfg, nil)
	consistent(t, rep, err)
	if rep.Acked != 100 || rep.Deliveries != 100*29 || rep.Echoes != 100 {
		t.Fatalf("acked %d, deliveries %d, echoes %d; want 100, 2900, 100", rep.Acked, rep.Deliveries, rep.Echoes)
	}
}

func TestValidateLargeGroups(t *testing.T) {
	bad := []struct {
		scenario string
		f        func(*Config)
	}{
		{"largegroup", func(c *Config) { c.Senders = c.Open + 1 }},
		{"largegroup", func(c *Config) { c.Open = c.Online + 1 }},
		{"largegroup", func(c *Config) { c.Rate = 0 }},
		{"largegroup", func(c *Config) { c.Online = c.Members }}, // 100,001 sockets in one process
		{"readstorm", func(c *Config) { c.Online = c.Members }},
		{"broadcast", func(c *Config) { c.Procs = 2 }},
		{"broadcast", func(c *Config) { c.Rate = 10 }},
		{"broadcast", func(c *Config) { c.Window = 0 }},
		{"broadcast-naive", func(c *Config) { c.Server, c.AdminSecret = "http://x", "s" }},
		{"largegroup", func(c *Config) { c.Baseline = true }},
	}
	for _, tc := range bad {
		c := DefaultConfig(tc.scenario)
		tc.f(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted %+v", tc.scenario, c)
		}
	}
	lg := DefaultConfig("largegroup")
	lg.Online, lg.Procs = 30000, 2
	if err := lg.Validate(); err != nil {
		t.Errorf("30,000 connections over 2 processes refused: %v", err)
	}
	b := DefaultConfig("broadcast")
	b.Baseline = true
	if err := b.Validate(); err != nil {
		t.Errorf("broadcast --baseline refused: %v", err)
	}
	if e := baselineConfig(b); e.Scenario != "broadcast-naive" || e.Members != b.Members || e.Window != b.Window {
		t.Errorf("broadcast's baseline is %+v", e)
	}
}

func TestMaxWithin(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		at   []time.Time
		want int
	}{
		{"none", nil, 0},
		{"one a second", at(0, 1000, 2000, 3000), 1},
		{"two within a second", at(0, 1000, 1500, 3000), 2},
		{"a second apart, less the jitter", at(0, 998, 1996), 1},
		{"a burst", at(0, 10, 20, 899, 2000), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maxWithin(tc.at, time.Second-typingJitter); got != tc.want {
				t.Fatalf("maxWithin = %d, want %d", got, tc.want)
			}
		})
	}
}
