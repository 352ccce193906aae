package live

import (
	"encoding/json"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/protocol"
)

// TestTypingFromTheBus: a write-fanout typing change from another node is pushed to the
// recipient's subscriptions as the node's own would be; one with a bad state, typer or
// conversation is dropped.
func TestTypingFromTheBus(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	c := testCluster(t, m, nil)
	sub := c.hub.Subscribe("bob", 8)
	defer sub.Close()
	send := func(msg busMsg) {
		msg.Node, msg.Kind = "n_other", kindTyping
		data, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		c.onUser("bob", data)
	}
	send(busMsg{Conv: "d_ab", User: "alice", Type: "dancing"})
	send(busMsg{Conv: "d_ab", User: "", Type: protocol.TypingStarted})
	send(busMsg{Conv: "", User: "alice", Type: protocol.TypingStarted})
	send(busMsg{Conv: "d_ab", User: "alice", Type: protocol.TypingStarted})
	select {
	case ev := <-sub.Events():
		want, _ := TypingBody("d_ab", "alice", true)
		if ev.Cursor != 0 || string(ev.Data) != string(want.Data) {
			t.Fatalf("pushed cursor %d %s, want the typing push %s", ev.Cursor, ev.Data, want.Data)
		}
	default:
		t.Fatal("the valid typing change was not pushed")
	}
	select {
	case ev := <-sub.Events():
		t.Fatalf("another push: %s", ev.Data)
	default:
	}
}
