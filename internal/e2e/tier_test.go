package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/tier"
)

// tierConfig seals every message older than a week, eight to a segment, so that a few dozen
// messages make several segments; a recall window of a month lets a cold message be
// recalled.
func tierConfig(c *server.Config) {
	c.Tier = tier.Config{HotWindow: 7 * 24 * time.Hour, SegmentMessages: 8, MinMessages: 1}
	c.Chat.RecallWindow = 30 * 24 * time.Hour
	c.Chat.WriteFanoutMax = 3 // the four-member group is a large one: read fanout
}

// fullHistory pages through the caller's history of convID, 200 at a time.
func fullHistory(t testing.TB, n *node, token, convID string) []map[string]any {
	t.Helper()
	var all []map[string]any
	for after := int64(0); ; {
		page := n.history(t, token, convID, after)
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = num(page[len(page)-1]["seq"])
	}
}

// TestColdHistory moves a direct conversation's and a large group's old messages into the
// cold tier and reads them back through every call that names a seq: history (whole, and
// pages across the boundary of the tiers and of segments), receipts and recall, before and
// after a restart.
func TestColdHistory(t *testing.T) {
	t.Run("default engine", func(t *testing.T) { testColdHistory(t, func(*server.Config) {}) })
	if os.Getenv(parleytest.EnvStore) == "" { // the other embedded engine as well
		t.Run("sqlite", func(t *testing.T) { testColdHistory(t, func(c *server.Config) { c.Engine = "sqlite" }) })
	}
}

func testColdHistory(t *testing.T, engine func(*server.Config)) {
	clk := &clock{}
	n := start(t, withClock(clk), tierConfig, engine)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	carol, dave := n.user(t, "carol"), n.user(t, "dave")
	direct := n.direct(t, alice, "bob")["conv_id"].(string)
	group := n.group(t, alice, "big", true, "bob", "carol", "dave")["conv_id"].(string)
	if f := n.brief(t, alice, group)["fanout"]; f != "read" {
		t.Fatalf("group fanout %v, want read", f)
	}
	for i := 1; i <= 20; i++ {
		from := alice
		if i%2 == 0 {
			from = bob
		}
		n.send(t, from, direct, fmt.Sprintf("d%d", i))
		n.send(t, from, group, fmt.Sprintf("g%d", i))
	}
	// A file in a conversation of its own: its message goes cold, the text after it stays hot.
	files := n.group(t, alice, "files", false, "bob")["conv_id"].(string)
	file := randomBytes(70_000, 9)
	fileID := n.upload(t, alice, file)["id"].(string)
	if r := n.sendAttachment(t, alice, files, "f1", 3, fileID, map[string]any{"name": "notes.bin"}); r.status != 200 {
		t.Fatalf("send the file: %d %s", r.status, r.raw)
	}
	n.send(t, alice, files, "after-the-file")
	n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": direct, "seq": 5})
	n.ok(t, "POST", "/v1/conversations/"+group+"/read", carol, map[string]any{"seq": 12})
	n.ok(t, "POST", "/v1/conversations/"+direct+"/read", bob, map[string]any{"seq": 9})

	type reader struct{ name, token, conv string }
	readers := []reader{{"alice direct", alice, direct}, {"bob direct", bob, direct},
		{"alice group", alice, group}, {"carol group", carol, group}, {"dave group", dave, group}}
	before := map[string][]map[string]any{}
	for _, r := range readers {
		before[r.name] = fullHistory(t, n, r.token, r.conv)
	}
	receipts := func(conv string, seq int) map[string]any {
		return n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/receipts?seq=%d", conv, seq), alice, nil)
	}
	receiptsBefore := []map[string]any{receipts(direct, 9), receipts(group, 3), receipts(group, 12)}

	clk.advance(8 * 24 * time.Hour)
	for i := 21; i <= 23; i++ {
		n.send(t, alice, direct, fmt.Sprintf("d%d", i))
		n.send(t, alice, group, fmt.Sprintf("g%d", i))
	}
	st, err := n.Sealer.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 41 || st.Segments != 7 || st.Conflicts != 0 {
		t.Fatalf("pass %+v: want the 20 old messages of each conversation sealed, 8 to a segment (6 segments), and the file's message", st)
	}
	if st.Bytes <= 0 || st.RawBytes <= st.Bytes {
		t.Errorf("pass %+v: want segments smaller than their raw encoding", st)
	}

	t.Run("snapshots read no cold message", func(t *testing.T) {
		snap := n.ok(t, "GET", "/v1/sync/snapshot?recent=20", bob, nil)
		msgs := obj(t, snap["messages"])
		if got := fmt.Sprint(seqs(arr(t, msgs[direct]))); got != "[21 22 23]" {
			t.Errorf("snapshot's recent messages of the direct conversation: %s, want only the hot 21-23", got)
		}
		if got := fmt.Sprint(seqs(arr(t, msgs[files]))); got != "[2]" {
			t.Errorf("snapshot's recent messages of the files group: %s, want its newest, 2", got)
		}
	})

	check := func(t *testing.T) {
		for _, r := range readers {
			got := fullHistory(t, n, r.token, r.conv)
			if len(got) != len(before[r.name])+3 || !reflect.DeepEqual(got[:len(before[r.name])], before[r.name]) {
				t.Errorf("%s: history after tiering differs:\n got %s\nwant %s + 3 new", r.name, show(got), show(before[r.name]))
			}
		}
		page := n.ok(t, "GET", "/v1/conversations/"+direct+"/messages?before_seq=23&limit=5", bob, nil)
		if got := fmt.Sprint(seqs(arr(t, page["messages"]))); got != "[18 19 20 21 22]" || page["has_more"] != true {
			t.Errorf("page below 23 across the tiers: %s has_more %v", got, page["has_more"])
		}
		page = n.ok(t, "GET", "/v1/conversations/"+group+"/messages?after_seq=6&limit=5", dave, nil)
		if got := fmt.Sprint(seqs(arr(t, page["messages"]))); got != "[7 8 9 10 11]" || page["has_more"] != true {
			t.Errorf("page above 6 across two segments: %s has_more %v", got, page["has_more"])
		}
		page = n.ok(t, "GET", "/v1/conversations/"+group+"/messages?after_seq=18&limit=10", carol, nil)
		if got := fmt.Sprint(seqs(arr(t, page["messages"]))); got != "[19 20 21 22 23]" || page["has_more"] != false {
			t.Errorf("page above 18 to the end: %s has_more %v", got, page["has_more"])
		}
		for i, rc := range []map[string]any{receipts(direct, 9), receipts(group, 3), receipts(group, 12)} {
			if !reflect.DeepEqual(rc, receiptsBefore[i]) {
				t.Errorf("receipts %d of a cold message: %s, before tiering %s", i, show(rc), show(receiptsBefore[i]))
			}
		}
	}
	t.Run("reads the same", check)

	t.Run("jump to a date", func(t *testing.T) {
		hist := fullHistory(t, n, bob, direct)
		firstAt := func(ts int64) int64 {
			for _, m := range hist {
				if num(m["created_at"]) >= ts {
					return num(m["seq"])
				}
			}
			return 0
		}
		for _, ts := range []int64{num(hist[0]["created_at"]) - 1, num(hist[9]["created_at"]), num(hist[19]["created_at"]) + 86_400_000, num(hist[22]["created_at"]) + 1} {
			page := n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/messages?around_ts=%d&limit=6", direct, ts), bob, nil)
			got := int64(0) // absent when no message is at or after ts
			if v, ok := page["anchor_seq"]; ok {
				got = num(v)
			}
			if want := firstAt(ts); got != want {
				t.Errorf("around %d: anchor %d, want %d", ts, got, want)
			}
		}
	})

	t.Run("recall of a cold message", func(t *testing.T) {
		n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": direct, "seq": 3})
		n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": direct, "seq": 3}) // twice is one recall
		n.fail(t, 403, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": direct, "seq": 4})
		for _, tok := range []string{alice, bob} {
			m := fullHistory(t, n, tok, direct)[2]
			if m["seq"] != float64(3) || m["recalled"] != true || m["content"] != nil {
				t.Errorf("cold message 3 after its recall: %s", show(m))
			}
		}
		before["alice direct"][2], before["bob direct"][2] = fullHistory(t, n, alice, direct)[2], fullHistory(t, n, bob, direct)[2]
	})

	t.Run("a cold message's attachment", func(t *testing.T) {
		if got := n.download(t, bob, fileID, "content", 200, nil); !bytes.Equal(got.raw, file) {
			t.Fatal("bob's download of the file a cold message carries differs")
		}
		n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": files, "seq": 1})
		n.fail(t, 404, "GET", "/v1/attachments/"+fileID, bob, nil) // no message left that bob can see carries it
		n.ok(t, "GET", "/v1/attachments/"+fileID, alice, nil)      // the uploader still sees it
	})

	t.Run("a second pass seals nothing", func(t *testing.T) {
		st, err := n.Sealer.Pass(context.Background())
		if err != nil || st.Messages != 0 || st.Orphans != 0 {
			t.Fatalf("second pass %+v, %v", st, err)
		}
	})

	t.Run("after a restart", func(t *testing.T) {
		parleytest.OneNode(t, "restarts the node on its data")
		cfg := n.Config
		n.Stop(t)
		n = &node{parleytest.StartWith(t, cfg)}
		check(t)
	})
}

// counter returns the value of a counter (summed over its labels) in one node's metrics.
func counter(t testing.TB, s *parleytest.Server, name string) float64 {
	t.Helper()
	families, err := s.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestSealerRunsOnOneNode lets every node's sealer run on its own schedule: the old messages
// are sealed exactly once, and on several nodes only one of them ever makes a pass.
func TestSealerRunsOnOneNode(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk), tierConfig, func(c *server.Config) { c.Tier.Interval = 20 * time.Millisecond })
	alice := n.user(t, "alice")
	n.user(t, "bob")
	direct := n.direct(t, alice, "bob")["conv_id"].(string)
	for i := 1; i <= 10; i++ {
		n.send(t, alice, direct, fmt.Sprintf("d%d", i))
	}
	before := fullHistory(t, n, alice, direct)
	clk.advance(8 * 24 * time.Hour)
	n.send(t, alice, direct, "new")
	nodes := n.Nodes
	if nodes == nil {
		nodes = []*parleytest.Server{n.Server}
	}
	sealed := func() float64 {
		sum := 0.0
		for _, s := range nodes {
			sum += counter(t, s, "parley_tier_sealed_messages_total")
		}
		return sum
	}
	eventually(t, "the ten old messages sealed", func() bool { return sealed() >= 10 })
	// Two more passes of the leader, to give any other node the time to make one.
	var leader *parleytest.Server
	for _, s := range nodes {
		if counter(t, s, "parley_tier_passes_total") > 0 {
			if leader != nil {
				t.Fatal("two nodes made tiering passes")
			}
			leader = s
		}
	}
	done := counter(t, leader, "parley_tier_passes_total")
	eventually(t, "two more passes", func() bool { return counter(t, leader, "parley_tier_passes_total") >= done+2 })
	for _, s := range nodes {
		if s != leader && counter(t, s, "parley_tier_passes_total") > 0 {
			t.Fatal("a second node made a tiering pass")
		}
	}
	if got := sealed(); got != 10 {
		t.Errorf("%v messages sealed, want the 10 old ones once", got)
	}
	if got := fullHistory(t, n, alice, direct); !reflect.DeepEqual(got[:10], before) || len(got) != 11 {
		t.Errorf("history after tiering: %s", show(got))
	}
}
