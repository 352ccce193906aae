package presence

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// testTracker returns a tracker whose own turns never come (Tick is an hour): the test
// turns it with Turn at the times it chooses.
func testTracker(t *testing.T, now *time.Time) *Tracker {
	t.Helper()
	tr := New(Config{Tick: time.Hour, Grace: 30 * time.Second, Timeout: time.Minute, Coalesce: 5 * time.Second},
		func() time.Time { return *now }, nil)
	t.Cleanup(tr.Close)
	return tr
}

func TestWatchCap(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	w := tr.NewWatcher(func() {})
	var users []string
	for i := range 500 {
		users = append(users, fmt.Sprintf("u%d", i))
	}
	if _, err := w.Watch(users, false); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Watch([]string{"one-more"}, false); !errors.Is(err, ErrTooMany) {
		t.Errorf("501st user: %v, want ErrTooMany", err)
	}
	if _, err := w.Watch(users[:1], false); err != nil {
		t.Errorf("a user already followed: %v", err)
	}
	if _, err := w.Watch([]string{"x", "y"}, true); err != nil || w.Len() != 2 {
		t.Errorf("replace: %v, %d followed", err, w.Len())
	}
}

// TestRemoteExpires: what another node told is believed until Timeout after its last word,
// then the user goes offline for the watchers here, in one batch.
func TestRemoteExpires(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	var notified atomic.Int32
	w := tr.NewWatcher(func() { notified.Add(1) })
	w.Watch([]string{"alice"}, false)
	tr.receive([]byte(`{"n":"other","k":"b","us":[{"u":"alice","s":2}]}`))
	tr.Turn(now)
	if got := w.Take(); len(got) != 1 || got[0].State != Online {
		t.Fatalf("after the heartbeat: %+v, want alice online", got)
	}
	now = now.Add(59 * time.Second)
	tr.Turn(now)
	if got := w.Take(); got != nil {
		t.Fatalf("within the timeout: %+v, want nothing", got)
	}
	now = now.Add(time.Second)
	tr.Turn(now)
	if got := w.Take(); len(got) != 1 || got[0].State != Offline {
		t.Fatalf("after the timeout: %+v, want alice offline", got)
	}
	if notified.Load() != 2 {
		t.Errorf("notified %d times, want 2", notified.Load())
	}
}

// TestGraceAndCoalesce: a reconnect within the grace hands out nothing; a change within
// Coalesce of the last waits for it.
func TestGraceAndCoalesce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	w := tr.NewWatcher(func() {})
	w.Watch([]string{"alice"}, false)
	tr.Connected("alice", "d1")
	tr.Turn(now)
	if got := w.Take(); len(got) != 1 || got[0].State != Online {
		t.Fatalf("connected: %+v", got)
	}
	tr.Disconnected("alice", "d1")
	now = now.Add(29 * time.Second)
	tr.Turn(now)
	tr.Connected("alice", "d1")
	now = now.Add(10 * time.Second)
	tr.Turn(now)
	if got := w.Take(); got != nil {
		t.Fatalf("reconnected within the grace: %+v, want nothing", got)
	}
	tr.SetAway("alice", "d1", true)
	tr.Turn(now)
	tr.SetAway("alice", "d1", false)
	tr.SetAway("alice", "d1", true)
	now = now.Add(time.Second)
	tr.Turn(now)
	if got := w.Take(); len(got) != 1 || got[0].State != Away {
		t.Fatalf("away: %+v", got)
	}
	tr.SetAway("alice", "d1", false)
	now = now.Add(time.Second)
	tr.Turn(now)
	if got := w.Take(); got != nil {
		t.Fatalf("within Coalesce: %+v, want nothing", got)
	}
	now = now.Add(4 * time.Second)
	tr.Turn(now)
	if got := w.Take(); len(got) != 1 || got[0].State != Online {
		t.Fatalf("after Coalesce: %+v, want online", got)
	}
}
