package push

import (
	"testing"
	"time"
)

// TestPresenceSettlesWritesOnlyOnConnectionsThatStayOpen: events written to a WebSocket
// count as taken once the connection has stayed open a second after the write; a
// connection that closes sooner may have lost them (a tab being closed), so they do not,
// and the device is pushed. A sync's cursor counts at once.
func TestPresenceSettlesWritesOnlyOnConnectionsThatStayOpen(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPresence(func() time.Time { return now })
	const grace = 3 * time.Second
	taken := func() int64 { _, c := p.state("bob", "phone", grace); return c }

	p.Open("bob", "phone")
	p.Sent("bob", "phone", 5)
	if live, c := p.state("bob", "phone", grace); !live || c != 0 {
		t.Fatalf("just written: live %v taken %d, want live and nothing taken yet", live, c)
	}
	now = now.Add(sentSettle)
	if c := taken(); c != 5 {
		t.Fatalf("a second later on an open connection: taken %d, want 5", c)
	}
	p.Sent("bob", "phone", 9)
	now = now.Add(200 * time.Millisecond)
	p.Close("bob", "phone") // closed 200 ms after writing 9: 9 may be lost
	if c := taken(); c != 5 {
		t.Fatalf("after a close right after the write: taken %d, want 5", c)
	}
	if live, _ := p.state("bob", "phone", grace); !live {
		t.Fatal("within the grace period after the close the device still counts as live")
	}
	now = now.Add(grace)
	if live, _ := p.state("bob", "phone", grace); live {
		t.Fatal("live after the grace period")
	}
	p.Took("bob", "phone", 9) // a sync from cursor 9: it has them
	if c := taken(); c != 9 {
		t.Fatalf("after a sync from 9: taken %d", c)
	}

	// A busy connection written to every 100 ms keeps settling what is a second old.
	p.Open("bob", "tablet")
	for i := range 30 {
		p.Sent("bob", "tablet", int64(100+i))
		now = now.Add(100 * time.Millisecond)
	}
	if _, c := p.state("bob", "tablet", grace); c < 119 || c >= 129 {
		t.Fatalf("busy connection: taken %d, want the writes of a second ago (about 120)", c)
	}
}
