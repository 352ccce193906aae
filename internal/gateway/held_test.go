package gateway

import (
	"testing"

	"github.com/parleychat/parley/internal/hub"
)

// TestCatchUpHoldsBoundedEphemeralPushes: the ephemeral pushes (room messages, receipts)
// taken while a catch-up reads the log are held up to SendQueue; one more, and the
// connection is closed as too slow, holding nothing, rather than holding all that comes
// for as long as the catch-up lasts. The log's events among them are never held.
func TestCatchUpHoldsBoundedEphemeralPushes(t *testing.T) {
	const limit = 8
	h := hub.New()
	sub := h.Watch("alice", 4*limit, func() {})
	defer sub.Close()
	c := &wsConn{g: &Gateway{cfg: Config{SendQueue: limit}}, done: make(chan struct{})}
	c.writer.Store(writerRunning) // close wakes a writer: there is none to start here

	body := &hub.Body{Type: "receipts", ConvID: "g_1", Data: []byte(`{"op":"receipts"}`)}
	for i := range limit {
		h.Publish("alice", []hub.Event{{Body: body}, {Cursor: int64(i + 1), Body: body}})
	}
	if ok := c.drain(sub); !ok || len(c.held) != limit || c.closing() {
		t.Fatalf("drain of %d ephemeral pushes: ok %v, held %d, closing %v; want true, %d, open",
			limit, ok, len(c.held), c.closing(), limit)
	}
	h.Publish("alice", []hub.Event{{Body: body}})
	if ok := c.drain(sub); ok || !c.closing() || c.closeCode != CloseTooSlow || c.held != nil {
		t.Fatalf("one more: ok %v, closing %v, code %d, held %d; want closed as too slow, holding nothing",
			ok, c.closing(), c.closeCode, len(c.held))
	}
}
