package e2e

import (
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/server"
)

// TestNodesPresenceOnlineCount: a read-fanout group's brief (GET and the open op's answer)
// carries how many of its members are connected to any node, counted at most every
// chat.OnlineRefresh: a member connecting or leaving shows once the node's clock has
// passed it, not before; a member who hides their presence is not counted. A write-fanout
// group's brief has no count.
func TestNodesPresenceOnlineCount(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		clk := &clock{}
		ns := startNodes(t, 2, newBus, withClock(clk), fastPresence(100*time.Millisecond, time.Millisecond),
			func(c *server.Config) {
				c.Presence.Timeout = time.Hour // the test's clock jumps: the other node's news must outlive them
				c.Chat.WriteFanoutMax = 2
				c.Gateway.ConvCreateEvery = 0
			})
		tok := map[string]string{}
		for _, u := range []string{"alice", "bob", "carol", "dave"} {
			tok[u] = ns[0].user(t, u)
		}
		convID := ns[0].group(t, tok["alice"], "big", false, "bob", "carol", "dave")["conv_id"].(string)
		small := ns[0].group(t, tok["alice"], "small", false, "bob")
		if _, ok := small["online_count"]; ok || small["fanout"] != "write" {
			t.Fatalf("write-fanout brief: %s", show(small))
		}
		count := func(what string, want int64) {
			t.Helper()
			b := ns[0].brief(t, tok["alice"], convID)
			checkBrief(t, what, b)
			if b["fanout"] != "read" || num(b["online_count"]) != want {
				t.Fatalf("%s: brief %s, want online_count %d", what, show(b), want)
			}
		}
		count("nobody connected", 0)

		// alice watches carol and dave through direct conversations, to know when node 0
		// has learnt of their connections to node 1.
		ns[0].direct(t, tok["alice"], "carol")
		ns[0].direct(t, tok["alice"], "dave")
		watcher := ns[0].dial(t, tok["alice"], -1)
		subscribe(t, watcher, "carol", "dave")
		bob := ns[0].dial(t, tok["bob"], -1)
		carol := ns[1].dial(t, tok["carol"], -1)
		wantState(t, "carol on node 1", presencePush(t, watcher, "carol"), "online")
		count("within the refresh", 0) // alice's own connection and the others not yet
		clk.advance(chat.OnlineRefresh)
		count("after the refresh", 3) // alice and bob on node 0, carol on node 1

		r := bob.do("open", map[string]any{"conv_id": convID})
		if num(r["code"]) != 0 || num(r["online_count"]) != 3 {
			t.Fatalf("open: %s", show(r))
		}

		ns[1].ok(t, "PATCH", "/v1/me", tok["dave"], map[string]any{"presence": "hidden"})
		ns[1].dial(t, tok["dave"], -1)
		carol.conn.Close()
		wantState(t, "carol gone", presencePush(t, watcher, "carol"), "offline")
		clk.advance(chat.OnlineRefresh)
		count("carol gone, dave hidden", 2)
	})
}
