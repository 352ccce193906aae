package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/protocol"
)

// TestGroupPushBytes: the server encodes a group message's push once for all the members and
// splices in each member's cursor; every member's connection must still receive, byte for
// byte, the standard encoding of its own SyncEvent (json.Marshal of the push frame, with the
// event as GET /v1/sync serves it), escapes included.
func TestGroupPushBytes(t *testing.T) {
	n := start(t)
	members := []string{"alice", "bob", "carol"}
	tokens := make([]string, len(members))
	for i, u := range members {
		tokens[i] = n.user(t, u)
	}
	conv := n.group(t, tokens[0], "g", false, members[1:]...)["conv_id"].(string)
	before := make([]int64, len(members))
	for i := range members {
		before[i] = n.latest(t, tokens[i])
	}
	conns := make([]func() []byte, len(members))
	for i := range members {
		conn, _, err := n.dialRaw(tokens[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns[i] = func() []byte {
			_ = conn.SetReadDeadline(time.Now().Add(deadline))
			_, frame, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("%s: no push: %v", members[i], err)
			}
			return frame
		}
	}
	n.ok(t, "POST", "/v1/messages", tokens[0], map[string]any{"conv_id": conv, "client_msg_id": "m-1", "content_type": 1,
		"content": map[string]any{"text": "<b>tom & jerry</b> \u2028 é 🙂", "n": 9007199254740991}})
	for i, u := range members {
		got := conns[i]()
		resp := n.call(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d&limit=1", before[i]), tokens[i], nil)
		var page protocol.SyncResponse
		if err := json.Unmarshal(resp.raw, &page); err != nil || len(page.Events) != 1 {
			t.Fatalf("%s: sync %s: %v", u, resp.raw, err)
		}
		want, err := json.Marshal(protocol.PushFrame{Op: protocol.OpEvent, Event: &page.Events[0]})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: pushed\n%s\nwant\n%s", u, got, want)
		}
	}
}
