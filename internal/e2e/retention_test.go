package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/tier"
)

// retentionConfig keeps messages 30 days, sealing those older than 20 days four to a
// segment: a message goes cold before it expires, or expires while still hot when it was
// sent less than 20 days before its expiry's pass.
func retentionConfig(c *server.Config) {
	c.Tier = tier.Config{HotWindow: 20 * 24 * time.Hour, Retention: 30 * 24 * time.Hour, SegmentMessages: 4, MinMessages: 1}
	c.Chat.RecallWindow = 60 * 24 * time.Hour
	c.Chat.DefaultTokenTTL = 365 * 24 * time.Hour // the test spans two months
}

// page is one history page of convID with the query q, as token's member sees it.
func (n *node) page(t testing.TB, token, convID, q string) (seqs []int64, hasMore bool, expiredBefore int64) {
	t.Helper()
	p := n.ok(t, "GET", "/v1/conversations/"+convID+"/messages?"+q, token, nil)
	for _, m := range arr(t, p["messages"]) {
		seqs = append(seqs, num(m["seq"]))
	}
	if v, ok := p["expired_before_seq"]; ok {
		expiredBefore = num(v)
	}
	return seqs, p["has_more"] == true, expiredBefore
}

// pass runs one tiering pass and fails the test if it fails.
func (n *node) pass(t testing.TB, what string) tier.PassStats {
	t.Helper()
	st, err := n.Sealer.Pass(context.Background())
	if err != nil {
		t.Fatalf("pass %s: %v", what, err)
	}
	return st
}

// TestRetention expires a direct conversation's messages, first a sealed run, then a hot
// one, over real sockets: reads leave them out as soon as they are past the retention,
// before any pass; a page that reaches them carries expired_before_seq; seqs stay
// gapless; receipts and recalls of them are 404; each pass deletes what expired and
// uncounts the attachment an expired message carried, cold or hot, so that the collector
// deletes it a day later and not before.
func TestRetention(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk), retentionConfig)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.user(t, "carol")
	d := n.direct(t, alice, "bob")["conv_id"].(string)
	quiet := n.direct(t, alice, "carol")["conv_id"].(string)
	coldAtt := n.upload(t, alice, bytes.Repeat([]byte("c"), 100))["id"].(string)
	hotAtt := n.upload(t, alice, bytes.Repeat([]byte("h"), 100))["id"].(string)
	day := 24 * time.Hour
	sendN := func(from, to int, carrier int, att string) {
		for i := from; i <= to; i++ {
			if i == carrier {
				if r := n.sendAttachment(t, alice, d, fmt.Sprintf("m%d", i), 3, att, map[string]any{"name": "f.txt"}); r.status != http.StatusOK {
					t.Fatalf("send %d: %d %s", i, r.status, r.raw)
				}
				continue
			}
			if got := num(n.send(t, alice, d, fmt.Sprintf("m%d", i))["seq"]); got != int64(i) {
				t.Fatalf("message %d took seq %d", i, got)
			}
		}
	}
	collect := func(what string, want int) {
		t.Helper()
		gone, err := n.Attachments.Collect(t.Context(), clk.now().Add(25*time.Hour))
		if err != nil || gone != want {
			t.Fatalf("collect %s: %d, %v; want %d", what, gone, err, want)
		}
	}
	wantPage := func(what, q, want string, wantMore bool, wantExpired int64) {
		t.Helper()
		got, more, exp := n.page(t, bob, d, q)
		if fmt.Sprint(got) != want || more != wantMore || exp != wantExpired {
			t.Errorf("%s (%s): %v has_more %v expired_before_seq %d; want %s, %v, %d", what, q, got, more, exp, want, wantMore, wantExpired)
		}
	}

	// Day 0: 1..8, 2 carrying coldAtt; one message in the quiet conversation.
	sendN(1, 8, 2, coldAtt)
	n.send(t, alice, quiet, "q1")
	n.ok(t, "POST", "/v1/conversations/"+d+"/read", bob, map[string]any{"seq": 3})
	// Day 21: 1..7 go cold (8, the newest, stays hot); 9..12 are sent, 10 carrying hotAtt.
	clk.advance(21 * day)
	if st := n.pass(t, "day 21"); st.Messages != 7 || st.Segments != 2 || st.Expired != 0 {
		t.Fatalf("pass on day 21: %+v, want 1..7 sealed in two segments and nothing expired", st)
	}
	sendN(9, 12, 10, hotAtt)
	wantPage("everything, before any expiry", "limit=50", "[1 2 3 4 5 6 7 8 9 10 11 12]", false, 0)

	// Day 35: 1..8 (1..7 cold, 8 hot) are past the retention; 13..15 are sent.
	clk.advance(14 * day)
	sendN(13, 15, 0, "")
	t.Run("expired cold messages read as gone before the pass", func(t *testing.T) {
		wantPage("the whole history", "limit=50", "[9 10 11 12 13 14 15]", false, 9)
		wantPage("the first page", "limit=3", "[9 10 11]", true, 9)
		wantPage("a page that stops above them", "before_seq=16&limit=3", "[13 14 15]", true, 0)
		wantPage("the page below 11", "before_seq=11&limit=5", "[9 10]", false, 9)
		wantPage("the page above 2", "after_seq=2&limit=3", "[9 10 11]", true, 9)
		wantPage("the page above 10", "after_seq=10&limit=50", "[11 12 13 14 15]", false, 0)
		wantPage("the page below 9", "before_seq=9&limit=5", "[]", false, 9)
		wantPage("a jump before them", "around_ts=1&limit=4", "[9 10 11 12]", true, 9)
		n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+d+"/receipts?seq=5", alice, nil)
		n.fail(t, http.StatusNotFound, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": d, "seq": 6})
		n.ok(t, "GET", "/v1/conversations/"+d+"/receipts?seq=9", alice, nil)
		b := n.brief(t, alice, quiet)
		if b["last_message"] != nil || num(b["max_seq"]) != 1 {
			t.Errorf("a conversation whose every message expired: %s, want max_seq 1 and no last_message", show(b))
		}
		if got, _, exp := n.page(t, alice, quiet, "limit=50"); len(got) != 0 || exp != 2 {
			t.Errorf("the quiet conversation: %v expired_before_seq %d, want none and 2", got, exp)
		}
		// Unread is positional: bob read to 3, so 4..15 count, expired or not, until he reads on.
		if u := num(n.brief(t, bob, d)["unread"]); u != 12 {
			t.Errorf("bob's unread: %d, want 12 (max_seq 15 - read_seq 3)", u)
		}
		collect("before the pass", 0)
	})
	t.Run("the pass deletes the cold ones and uncounts their attachment", func(t *testing.T) {
		st := n.pass(t, "day 35")
		if st.Expired != 9 || st.ExpiredSegments != 2 || st.Messages != 0 {
			t.Fatalf("pass on day 35: %+v, want the two segments of 1..7, the hot 8 and quiet's hot 1 expired, nothing sealed", st)
		}
		collect("after the cold expiry", 1)
		n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+coldAtt, alice, nil)
		n.ok(t, "GET", "/v1/attachments/"+hotAtt, alice, nil)
		wantPage("the whole history", "limit=50", "[9 10 11 12 13 14 15]", false, 9)
		if st := n.pass(t, "day 35 again"); st.Expired != 0 || st.Orphans != 0 {
			t.Errorf("a second pass: %+v, want nothing", st)
		}
	})

	// Day 52: 9..12, still hot (sent 31 days ago, sealed after 20: never by a pass), expire.
	clk.advance(17 * day)
	t.Run("expired hot messages", func(t *testing.T) {
		wantPage("the whole history", "limit=50", "[13 14 15]", false, 13)
		collect("before the pass", 0)
		st := n.pass(t, "day 52")
		if st.Expired != 4 || st.ExpiredSegments != 0 {
			t.Fatalf("pass on day 52: %+v, want the 4 hot messages 9..12 expired", st)
		}
		collect("after the hot expiry", 1)
		n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+hotAtt, alice, nil)
		wantPage("the whole history", "limit=50", "[13 14 15]", false, 13)
		n.ok(t, "POST", "/v1/conversations/"+d+"/read", bob, map[string]any{"seq": 15})
		if u := num(n.brief(t, bob, d)["unread"]); u != 0 {
			t.Errorf("bob's unread after reading to 15: %d", u)
		}
		if got := num(n.send(t, alice, d, "m16")["seq"]); got != 16 {
			t.Errorf("the next message took seq %d, want 16: seqs are never reused", got)
		}
	})
}
