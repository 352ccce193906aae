package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// leadResult is what a Lead called in the background returned.
type leadResult struct {
	lost    <-chan struct{}
	release func()
	err     error
}

// leadAsync calls s.Lead in the background.
func leadAsync(ctx context.Context, s *Store, name string) <-chan leadResult {
	ch := make(chan leadResult, 1)
	go func() {
		lost, release, err := s.Lead(ctx, name)
		ch <- leadResult{lost, release, err}
	}()
	return ch
}

// waitLead waits up to d for a background Lead and fails the test unless it led.
func waitLead(t *testing.T, ch <-chan leadResult, d time.Duration, what string) leadResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lead: %v", what, r.err)
		}
		return r
	case <-time.After(d):
		t.Fatalf("%s: Lead did not return within %v", what, d)
	}
	return leadResult{}
}

// stillWaiting fails the test if a background Lead returned.
func stillWaiting(t *testing.T, ch <-chan leadResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Lead returned (err %v) while another Store leads", what, r.err)
	default:
	}
}

// isClosed reports whether ch is closed, waiting for it up to d.
func isClosed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// lockHolder returns the backend pid holding the lead for name on s's schema, 0 if none.
func lockHolder(t *testing.T, admin *pgx.Conn, s *Store, name string) uint32 {
	t.Helper()
	ctx := t.Context()
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	key := uint64(leadKey(schema, name))
	var pid uint32
	err := admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`,
		int64(key>>32), int64(key&0xFFFFFFFF)).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestLeader runs two Stores on one schema, as two nodes: the second's Lead waits while
// the first leads and gets the lead once it is released; terminating the leader's session
// closes its lost channel and lets the other lead; a Lead whose ctx ends returns its error;
// Close ends a lead still held, and a Lead still waiting.
func TestLeader(t *testing.T) {
	key := t.TempDir()
	a := openTest(t, key, Options{})
	b := openTest(t, key, Options{})
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	const name = "pusher"

	lostA, releaseA, err := a.Lead(ctx, name)
	if err != nil {
		t.Fatalf("a.Lead: %v", err)
	}
	holderA := lockHolder(t, admin, a, name)
	if holderA == 0 {
		t.Fatal("a leads, but no session holds the lock")
	}
	var poolPID uint32
	if err := a.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&poolPID); err != nil {
		t.Fatal(err)
	}
	if poolPID == holderA {
		t.Error("the lock is held by a connection of the pool")
	}
	if other := lockHolder(t, admin, a, "another job"); other != 0 {
		t.Errorf("the lead for another name is held by %d", other)
	}

	// b waits while a leads, then leads once a releases.
	chB := leadAsync(ctx, b, name)
	time.Sleep(2*leadPoll + leadPoll/2)
	stillWaiting(t, chB, "b while a leads")
	releaseA()
	releaseA() // a second release does nothing
	rB := waitLead(t, chB, 3*leadPoll+time.Second, "b after a released")
	if isClosed(lostA, 0) {
		t.Error("a's lost channel closed by a release")
	}
	holderB := lockHolder(t, admin, b, name)
	if holderB == 0 || holderB == holderA {
		t.Fatalf("b leads, but the lock is held by %d (a's session was %d)", holderB, holderA)
	}

	// A Lead that cannot get the lead before its ctx ends returns ctx's error.
	short, cancel := context.WithTimeout(ctx, leadPoll+leadPoll/2)
	_, _, err = a.Lead(short, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lead with a ctx that ends while b leads: %v, want DeadlineExceeded", err)
	}

	// a waits again; terminating b's session loses b the lead and gives it to a.
	chA := leadAsync(ctx, a, name)
	time.Sleep(leadPoll)
	stillWaiting(t, chA, "a while b leads")
	var terminated bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, holderB).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", holderB, terminated, err)
	}
	if !isClosed(rB.lost, 3*leadCheck+time.Second) {
		t.Fatal("b's lost channel not closed after its session was terminated")
	}
	rB.release() // after a loss: does nothing harmful
	rA := waitLead(t, chA, 3*leadPoll+time.Second, "a after b's session was terminated")
	if isClosed(rA.lost, 0) {
		t.Error("a's new lead is lost at once")
	}

	// Close ends a lead still held: its lost closes and the other Store can lead.
	chB = leadAsync(ctx, b, name)
	if err := a.Close(); err != nil {
		t.Fatalf("a.Close: %v", err)
	}
	if !isClosed(rA.lost, time.Second) {
		t.Error("a's lost channel not closed by a.Close")
	}
	rA.release()
	rB = waitLead(t, chB, 3*leadPoll+time.Second, "b after a closed")

	// Close also ends a Lead that waits.
	c := openTest(t, key, Options{})
	chC := leadAsync(ctx, c, name)
	time.Sleep(leadPoll / 2)
	stillWaiting(t, chC, "c while b leads")
	if err := c.Close(); err != nil {
		t.Fatalf("c.Close: %v", err)
	}
	select {
	case r := <-chC:
		if !errors.Is(r.err, store.ErrUnavailable) {
			t.Errorf("a Lead waiting on a Store that closed: %v, want ErrUnavailable", r.err)
		}
	case <-time.After(leadPoll + time.Second):
		t.Error("a Lead waiting on a Store that closed did not return")
	}
	rB.release()
	if _, _, err := a.Lead(ctx, name); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Lead on a closed Store: %v, want ErrUnavailable", err)
	}
}
