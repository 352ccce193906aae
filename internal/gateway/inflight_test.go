package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// gatedStore reports every append started and holds its Wait until open is closed: the
// appends commit, but their senders cannot learn it.
type gatedStore struct {
	store.Store
	started chan struct{} // a value per StartAppend
	open    chan struct{}
}

func (g *gatedStore) StartAppend(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	p, err := g.Store.StartAppend(ctx, m)
	g.started <- struct{}{}
	if err != nil {
		return nil, err
	}
	return gatedAppend{p, g.open}, nil
}

type gatedAppend struct {
	store.PendingAppend
	open chan struct{}
}

func (a gatedAppend) Wait() (store.Appended, error) {
	<-a.open
	return a.PendingAppend.Wait()
}

// TestWSSendsInFlightAreBounded: a connection that writes more send frames than
// maxInFlight while none can be answered has exactly maxInFlight started, and its reader
// reads no further; once they are answered the rest go through, every reply in frame order
// with seqs in frame order, and a ping written after them is answered after them.
func TestWSSendsInFlightAreBounded(t *testing.T) {
	const sends = maxInFlight + 18
	gate := &gatedStore{started: make(chan struct{}, 2*sends), open: make(chan struct{})}
	ts := newTestServerOn(t, func(s store.Store) store.Store { gate.Store = s; return gate })
	release := sync.OnceFunc(func() { close(gate.open) })
	t.Cleanup(release) // before the server's shutdown, which waits for the sends
	alice := ts.user("alice", "phone")
	ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	ws := ts.dial(alice, "")
	for i := range sends {
		ws.write(fmt.Sprintf(`{"id":"s%d","op":"send","conv_id":%q,"client_msg_id":"m%d","content_type":1,"content":%d}`, i, c.ConvID, i, i))
	}
	ws.write(`{"id":"p","op":"ping"}`)
	for i := range maxInFlight {
		select {
		case <-gate.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d sends started, want %d in flight", i, maxInFlight)
		}
	}
	// Not a synchronisation: the time the reader would need to overrun the bound.
	select {
	case <-gate.started:
		t.Fatalf("more than %d sends started while none was answered", maxInFlight)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	for i := range sends {
		r := ws.readReply(fmt.Sprint("s", i))
		if r["code"] != 0.0 || r["seq"] != float64(i+1) || r["client_msg_id"] != fmt.Sprint("m", i) {
			t.Fatalf("reply to send %d: %v, want seq %d", i, r, i+1)
		}
	}
	if r := ws.readReply("p"); r["op"] != "pong" {
		t.Fatalf("reply to the ping: %v", r)
	}
}
