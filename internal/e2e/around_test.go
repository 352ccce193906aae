package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// around jumps to ts (Unix ms) in convID with limit and returns the page.
func (n *node) around(t testing.TB, token, convID string, ts int64, limit int) map[string]any {
	t.Helper()
	return n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/messages?around_ts=%d&limit=%d", convID, ts, limit), token, nil)
}

// aroundOf renders a jump's page as "seqs anchor has_more_before has_more_after", reading
// an absent field as its zero, as the contract says a client does.
func aroundOf(t testing.TB, page map[string]any) string {
	t.Helper()
	for k := range page {
		if !slices.Contains([]string{"messages", "has_more", "anchor_seq", "has_more_before", "has_more_after"}, k) {
			t.Errorf("page has the unknown key %q", k)
		}
	}
	ms := arr(t, page["messages"])
	for _, m := range ms {
		wantKeys(t, "message", m, messageKeys...)
	}
	anchor := int64(0)
	if a, ok := page["anchor_seq"]; ok {
		anchor = num(a)
	}
	return fmt.Sprintf("%v a%d b%v f%v", seqs(ms), anchor, page["has_more_before"] == true, page["has_more_after"] == true)
}

// TestJumpToDate: GET .../messages?around_ts over real sockets, on a node whose clock the
// test moves an hour between messages, for a member from the start, one who joined late and
// one who cleared; a recalled message is in the page as history shows it.
func TestJumpToDate(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk), func(c *server.Config) { c.Gateway.RequestRate = 0 })
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin"} {
		tok[u] = n.user(t, u)
	}
	convID := n.group(t, tok["alice"], "dates", false, "bob", "carol")["conv_id"].(string)
	var at []int64 // at[i]: created_at of seq i+1
	send := func() {
		clk.advance(time.Hour)
		ack := n.send(t, tok["alice"], convID, fmt.Sprintf("m%d", len(at)+1))
		at = append(at, num(ack["created_at"]))
	}
	for range 4 {
		send()
	}
	n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"add": []string{"dave"}}) // dave sees 5 on
	for range 2 {
		send()
	}
	n.ok(t, "DELETE", "/v1/conversations/"+convID, tok["carol"], nil) // carol sees 7 on
	for range 3 {
		send()
	}
	n.ok(t, "POST", "/v1/messages/recall", tok["alice"], map[string]any{"conv_id": convID, "seq": 7})
	for i := 1; i < len(at); i++ {
		if at[i]-at[i-1] < time.Hour.Milliseconds() {
			t.Fatalf("the node's clock did not move: created_at %v", at)
		}
	}
	for _, tc := range []struct {
		user  string
		ts    int64
		limit int
		want  string
	}{
		{"bob", at[0] - 1, 4, "[1 2 3 4] a1 bfalse ftrue"}, // before every message
		{"bob", at[4], 4, "[3 4 5 6] a5 btrue ftrue"},      // exactly at one
		{"bob", at[4] + 1, 4, "[4 5 6 7] a6 btrue ftrue"},  // between two
		{"bob", at[3] + time.Hour.Milliseconds()/2, 3, "[4 5 6] a5 btrue ftrue"},
		{"bob", at[8], 4, "[6 7 8 9] a9 btrue ffalse"},     // the newest; the older side fills
		{"bob", at[8] + 1, 4, "[6 7 8 9] a0 btrue ffalse"}, // after every message
		{"dave", at[0], 4, "[5 6 7 8] a5 bfalse ftrue"},    // below the joined-late floor
		{"dave", at[6], 4, "[5 6 7 8] a7 bfalse ftrue"},
		{"carol", at[1], 2, "[7 8] a7 bfalse ftrue"}, // below the cleared floor
		{"carol", at[8] + 1, 50, "[7 8 9] a0 bfalse ffalse"},
		{"carol", at[8], 50, "[7 8 9] a9 bfalse ffalse"},
	} {
		page := n.around(t, tok[tc.user], convID, tc.ts, tc.limit)
		if got := aroundOf(t, page); got != tc.want {
			t.Errorf("%s around %d (limit %d): %s, want %s", tc.user, tc.ts, tc.limit, got, tc.want)
		}
		for _, m := range arr(t, page["messages"]) {
			if num(m["seq"]) == 7 && (m["recalled"] != true || m["content"] != nil) {
				t.Errorf("%s: the recalled message is %s", tc.user, show(m))
			}
		}
	}
	// A plain page keeps its two keys.
	plain := n.ok(t, "GET", "/v1/conversations/"+convID+"/messages?limit=2", tok["bob"], nil)
	wantKeys(t, "plain page", plain, "messages", "has_more")

	for _, q := range []string{"around_ts=0", "around_ts=x", "around_ts=5&after_seq=1", "around_ts=5&before_seq=3"} {
		n.fail(t, http.StatusBadRequest, "GET", "/v1/conversations/"+convID+"/messages?"+q, tok["bob"], nil)
	}
	// after_seq=0 counts as absent, as for before_seq.
	if got := aroundOf(t, n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/messages?after_seq=0&around_ts=%d&limit=1", convID, at[2]), tok["bob"], nil)); got != "[3] a3 btrue ftrue" {
		t.Errorf("after_seq=0 with around_ts: %s", got)
	}
	n.fail(t, http.StatusNotFound, "GET", fmt.Sprintf("/v1/conversations/%s/messages?around_ts=%d", convID, at[0]), tok["erin"], nil) // not a member
}
