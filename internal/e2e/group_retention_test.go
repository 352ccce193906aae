package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/tier"
)

// groupRetentionConfig keeps messages for ever (no operator retention) and lets group
// owners choose between an hour and ten days; messages go cold after a day, four to a
// segment.
func groupRetentionConfig(c *server.Config) {
	c.Tier = tier.Config{HotWindow: 24 * time.Hour, SegmentMessages: 4, MinMessages: 1,
		GroupRetentionMin: time.Hour, GroupRetentionMax: 10 * 24 * time.Hour}
	c.Chat.RecallWindow = 60 * 24 * time.Hour
	c.Chat.DefaultTokenTTL = 365 * 24 * time.Hour
}

// TestGroupRetention: a group's owner gives it a retention of two days, over real sockets,
// while the operator keeps everything and another group keeps everything too. Only the
// owner may (403), only within the operator's bounds (400 naming them); a change is a
// conv_updated event, the same value again none; the brief's retention_seconds is the
// effective one. The group's messages past two days read as gone at once (history's
// expired_before_seq, receipts and recalls 404), cold and hot, the pass deletes them
// (counted by parley_tier_expired_messages_total), seqs and unread stay positional, and a
// retention of 0 gives the group back the operator's (for ever).
func TestGroupRetention(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk), groupRetentionConfig)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	short := n.group(t, alice, "short", false, "bob")["conv_id"].(string)
	kept := n.group(t, alice, "kept", false, "bob")["conv_id"].(string)
	d := n.direct(t, alice, "bob")["conv_id"].(string)
	day := 24 * time.Hour
	path := "/v1/conversations/" + short
	retention := func(b map[string]any) int64 { t.Helper(); return num(b["retention_seconds"]) }

	t.Run("who may set it, and what", func(t *testing.T) {
		n.fail(t, http.StatusForbidden, "PATCH", path, bob, map[string]any{"retention_seconds": 2 * 86400})
		for _, s := range []int64{60, 11 * 86400} {
			r := n.fail(t, http.StatusBadRequest, "PATCH", path, alice, map[string]any{"retention_seconds": s})
			if !strings.Contains(string(r.raw), "at least 3600, at most 864000") {
				t.Errorf("out of bounds %d: %s, want the bounds named", s, r.raw)
			}
		}
		n.fail(t, http.StatusBadRequest, "PATCH", "/v1/conversations/"+d, alice, map[string]any{"retention_seconds": 86400})
		n.fail(t, http.StatusBadRequest, "PATCH", path, alice, map[string]any{"retention_seconds": -1})
		n.fail(t, http.StatusBadRequest, "PATCH", path, alice, map[string]any{})
		if r := retention(n.brief(t, bob, short)); r != 0 {
			t.Errorf("retention_seconds before any is set: %d, want 0 (the operator keeps everything)", r)
		}
		cursor := n.latest(t, bob)
		if r := retention(n.ok(t, "PATCH", path, alice, map[string]any{"retention_seconds": 2 * 86400})); r != 2*86400 {
			t.Errorf("answer to the change: retention_seconds %d, want %d", r, 2*86400)
		}
		evs := n.events(t, bob, cursor)
		if len(evs) != 1 || evs[0]["type"] != "conv_updated" || retention(obj(t, evs[0]["data"])) != 2*86400 {
			t.Fatalf("bob's events after the change: %s, want one conv_updated with the retention", show(evs))
		}
		cursor = num(evs[0]["cursor"])
		n.ok(t, "PATCH", path, alice, map[string]any{"retention_seconds": 2 * 86400, "name": "short"})
		if evs := n.events(t, bob, cursor); len(evs) != 0 {
			t.Errorf("events after setting what the group has: %s, want none", show(evs))
		}
		if r := retention(n.brief(t, bob, kept)); r != 0 {
			t.Errorf("the other group's retention_seconds: %d, want 0", r)
		}
	})

	// Day 0: 1..6 in both groups; bob reads short to 2.
	for i := 1; i <= 6; i++ {
		n.send(t, alice, short, fmt.Sprintf("s%d", i))
		n.send(t, alice, kept, fmt.Sprintf("k%d", i))
	}
	n.ok(t, "POST", path+"/read", bob, map[string]any{"seq": 2})
	// Day 1.25: 1..5 of each go cold (6, the newest, stays hot); 7 and 8 are sent to short.
	clk.advance(day + 6*time.Hour)
	if st := n.pass(t, "day 1.25"); st.Messages != 10 || st.Expired != 0 {
		t.Fatalf("pass on day 1.25: %+v, want 1..5 of both groups sealed and nothing expired", st)
	}
	n.send(t, alice, short, "s7")
	n.send(t, alice, short, "s8")
	wantPage := func(what, conv, want string, wantExpired int64) {
		t.Helper()
		got, _, exp := n.page(t, bob, conv, "limit=50")
		if fmt.Sprint(got) != want || exp != wantExpired {
			t.Errorf("%s: %v expired_before_seq %d; want %s, %d", what, got, exp, want, wantExpired)
		}
	}

	// Day 2.5: short's 1..6 (five cold, one hot) are past its two days; 7 and 8 are not.
	clk.advance(day + 6*time.Hour)
	t.Run("its messages expire, the other group's do not", func(t *testing.T) {
		wantPage("short before the pass", short, "[7 8]", 7)
		wantPage("kept", kept, "[1 2 3 4 5 6]", 0)
		n.fail(t, http.StatusNotFound, "GET", path+"/receipts?seq=3", alice, nil)
		n.fail(t, http.StatusNotFound, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": short, "seq": 6})
		n.ok(t, "GET", path+"/receipts?seq=7", alice, nil)
		if u := num(n.brief(t, bob, short)["unread"]); u != 6 {
			t.Errorf("bob's unread in short: %d, want 6 (max_seq 8 - read_seq 2)", u)
		}
		before := n.metric(t, "parley_tier_expired_messages_total")
		st := n.pass(t, "day 2.5")
		if st.Expired != 6 || st.ExpiredSegments != 2 || st.Messages != 1 {
			t.Fatalf("pass on day 2.5: %+v, want short's two segments (1..5) and its hot 6 expired, its 7 sealed", st)
		}
		// On a cluster the balancer may answer /metrics from a node other than the one
		// that passed: the metric is checked on one node.
		if nodes, _ := strconv.Atoi(os.Getenv(parleytest.EnvNodes)); nodes < 2 {
			if got := n.metric(t, "parley_tier_expired_messages_total") - before; got != 6 {
				t.Errorf("parley_tier_expired_messages_total rose by %v, want 6", got)
			}
		}
		wantPage("short after the pass", short, "[7 8]", 7)
		wantPage("kept after the pass", kept, "[1 2 3 4 5 6]", 0)
		// 7 is cold now, its segment the first left: a page from the start that ends below
		// it once read the deleted segments' range again for ever.
		if got, more, exp := n.page(t, bob, short, "limit=1"); fmt.Sprint(got) != "[7]" || !more || exp != 7 {
			t.Errorf("short's first page of one: %v has_more %v expired_before_seq %d; want [7], true, 7", got, more, exp)
		}
		if got := num(n.send(t, alice, short, "s9")["seq"]); got != 9 {
			t.Errorf("short's next message took seq %d, want 9: seqs are never reused", got)
		}
	})

	t.Run("0 gives the group back the operator's", func(t *testing.T) {
		if r := retention(n.ok(t, "PATCH", path, alice, map[string]any{"retention_seconds": 0})); r != 0 {
			t.Errorf("retention_seconds after clearing: %d, want 0 (the operator keeps everything)", r)
		}
		clk.advance(30 * day)
		if st := n.pass(t, "day 32.5"); st.Expired != 0 {
			t.Errorf("pass 30 days after clearing: %+v, want nothing expired", st)
		}
		wantPage("short, 30 days on", short, "[7 8 9]", 7)
		wantPage("kept, 30 days on", kept, "[1 2 3 4 5 6]", 0)
	})
}
