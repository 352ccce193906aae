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
			start := time.Now() // nothing can be pushed before the first send
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
			// At most one push a second: n pushes take at least n-1 seconds from the first
			// send. Counted from the send rather than between arrivals, since a push the
			// server made on time may reach the client late (by a few hundred milliseconds
			// under -race on a database server) and so closer to the next; a tenth of a
			// second is left for the network on loopback.
			if elapsed := times[len(times)-1].Sub(start); time.Duration(len(times)-1)*900*time.Millisecond > elapsed {
				t.Errorf("%d receipts pushes within %v of the first send: more than one a second", len(times), elapsed)
			}
			t.Logf("%d receipts pushes", len(times))
		})
	}
}
