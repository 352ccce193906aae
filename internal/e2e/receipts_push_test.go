package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// TestReceiptsPushedOverWebSocket: alice sends two messages in a group of 5 and the
// others read them; alice's WebSocket receives receipts pushes whose counts end equal to
// what GET receipts answers, at most one a second for the conversation, in a write-fanout
// group and in a read-fanout one (whose reads are batched).
func TestReceiptsPushedOverWebSocket(t *testing.T) {
	for _, fanout := range []string{"write", "read"} {
		t.Run(fanout, func(t *testing.T) {
			n := start(t, func(c *server.Config) {
				if fanout == "read" {
					c.Chat.WriteFanoutMax = 3
				}
			})
			alice := n.user(t, "alice")
			readers := map[string]string{}
			for _, u := range []string{"bob", "carol", "dave", "erin"} {
				readers[u] = n.user(t, u)
			}
			g := n.group(t, alice, "five", false, "bob", "carol", "dave", "erin")
			convID := g["conv_id"].(string)
			if g["fanout"] != fanout {
				t.Fatalf("group fanout %v, want %s", g["fanout"], fanout)
			}
			ws := n.dial(t, alice, n.latest(t, alice))
			for i := range 2 {
				n.send(t, alice, convID, fmt.Sprint("m", i))
			}
			for _, tok := range readers {
				n.ok(t, "POST", "/v1/conversations/"+convID+"/read", tok, map[string]any{"seq": 2})
			}

			latest := map[int64]map[string]any{} // seq -> the counts last pushed
			var times []time.Time
			for num(obj(t, latest[1])["read_count"]) < 4 || num(obj(t, latest[2])["read_count"]) < 4 {
				p := ws.push()
				if p["op"] != "receipts" {
					continue // alice's own events
				}
				times = append(times, time.Now())
				wantKeys(t, "receipts push", p, "op", "conv_id", "receipts")
				if p["conv_id"] != convID {
					t.Fatalf("receipts push of %v, want %s", p["conv_id"], convID)
				}
				for _, r := range arr(t, p["receipts"]) {
					wantKeys(t, "pushed receipt", r, "seq", "member_count", "read_count", "delivered_count")
					latest[num(r["seq"])] = r
				}
			}
			for seq, r := range latest {
				got := n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/receipts?seq=%d", convID, seq), alice, nil)
				wantFields(t, fmt.Sprintf("pushed receipts of seq %d", seq), r, got)
			}
			minGap := 900 * time.Millisecond
			if cluster() {
				// Through a balancer, and after a raise that crossed the bus, on two
				// cores shared by three nodes: a push may be held up longer.
				minGap = 800 * time.Millisecond
			}
			for i := 1; i < len(times); i++ {
				// The server spaces pushes a second apart; the network may bring two a
				// little closer, never by a tenth of it on loopback.
				if gap := times[i].Sub(times[i-1]); gap < minGap {
					t.Errorf("receipts pushes %d and %d arrived %v apart, want about a second at least", i-1, i, gap)
				}
			}
			t.Logf("%d receipts pushes", len(times))
		})
	}
}
