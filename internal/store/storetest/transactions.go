package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Update fns may run on another goroutine (a group-committing backend runs them on its
// writer), so they report with t.Errorf, never t.Fatal.

func testUpdateErrorLeavesNothing(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	err := s.Update(t.Context(), func(tx store.Tx) error {
		ctx := t.Context()
		if err := tx.CreateUser(ctx, newUser("bob")); err != nil {
			return err
		}
		if err := tx.CreateConversation(ctx, newConversation("c1")); err != nil {
			return err
		}
		if err := tx.InsertMessage(ctx, newMessage("c1", 1, "alice")); err != nil {
			return err
		}
		if err := tx.SetTokenGen(ctx, "alice", 9); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, readEvent("alice", 1)); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", errTest)
	})
	if !errors.Is(err, errTest) || err.Error() != "wrapped: "+errTest.Error() {
		t.Fatalf("Update = %v, want fn's error unchanged", err)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.User(ctx, "bob")
		wantErr(t, "User created by a failed Update", err, store.ErrNotFound)
		_, err = tx.Conversation(ctx, "c1")
		wantErr(t, "Conversation created by a failed Update", err, store.ErrNotFound)
		_, err = tx.Message(ctx, "c1", 1)
		wantErr(t, "Message inserted by a failed Update", err, store.ErrNotFound)
		if u, err := tx.User(ctx, "alice"); err != nil || u.TokenGen != 1 {
			t.Errorf("User(alice) = %+v, %v; want TokenGen 1 untouched", u, err)
		}
		return nil
	})
	if got := appendEvents(t, s, "alice", 2); got[0] != 1 {
		t.Errorf("cursor after a failed Update = %d, want 1 (the failed one is not used)", got[0])
	}
}

// testUpdatePanicReachesCaller: a panic in fn is re-raised on the caller's goroutine, what fn
// wrote before it is undone, and the store keeps serving.
func testUpdatePanicReachesCaller(t *testing.T, s store.Store) {
	ctx := t.Context()
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the fn's panic", v)
			}
		}()
		_ = s.Update(ctx, func(tx store.Tx) error {
			if err := tx.CreateUser(ctx, store.User{ID: "ghost"}); err != nil {
				return err
			}
			panic("boom")
		})
		t.Error("Update returned after its fn panicked")
	}()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.User(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("User written by a panicking fn: %v, want ErrNotFound", err)
		}
		if _, err := tx.Cursors(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Cursors of a user written by a panicking fn: %v, want ErrNotFound", err)
		}
		return tx.CreateUser(ctx, store.User{ID: "ghost"})
	})
}

func testUpdateExistsDoesNotAbort(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "CreateUser of an existing id", tx.CreateUser(ctx, newUser("alice")), store.ErrExists)
		_, err := tx.Conversation(ctx, "none")
		wantErr(t, "Conversation of an unknown id", err, store.ErrNotFound)
		return tx.CreateUser(ctx, newUser("bob"))
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if _, err := tx.User(ctx, "bob"); err != nil {
			t.Errorf("write after an ErrExists in the same Update: User(bob): %v", err)
		}
		return nil
	})
}

func testUpdateSeesEarlier(t *testing.T, s store.Store) {
	for i := range 5 {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			if i > 0 {
				if _, err := tx.User(ctx, fmt.Sprint("u", i-1)); err != nil {
					t.Errorf("Update %d does not see the user of the Update before it: %v", i, err)
				}
			}
			return tx.CreateUser(ctx, newUser(fmt.Sprint("u", i)))
		})
	}
}

// runConcurrently runs fn(g, i) for i in [0, n) on each of g goroutines and waits.
func runConcurrently(goroutines, n int, fn func(g, i int)) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range n {
				fn(g, i)
			}
		})
	}
	wg.Wait()
}

func testUpdateConcurrentFailures(t *testing.T, s store.Store) {
	const goroutines, perGoroutine = 8, 60
	createUsers(t, s, "alice")
	var mu sync.Mutex
	seen := make(map[int64]bool) // cursors returned to Updates that succeeded
	runConcurrently(goroutines, perGoroutine, func(g, i int) {
		fail := i%3 == 0
		var cursor int64
		err := s.Update(t.Context(), func(tx store.Tx) (err error) {
			ctx := t.Context()
			if err := tx.CreateUser(ctx, newUser(fmt.Sprintf("u-%d-%d", g, i))); err != nil {
				return err
			}
			if cursor, err = tx.AppendEvent(ctx, readEvent("alice", int64(i))); err != nil {
				return err
			}
			if fail {
				return errTest
			}
			return nil
		})
		switch {
		case fail && !errors.Is(err, errTest):
			t.Errorf("failing Update %d/%d = %v, want its own error", g, i, err)
		case !fail && err != nil:
			t.Errorf("Update %d/%d: %v", g, i, err)
		case !fail:
			mu.Lock()
			defer mu.Unlock()
			if seen[cursor] {
				t.Errorf("cursor %d returned twice", cursor)
			}
			seen[cursor] = true
		}
	})
	succeeded := int64(goroutines * (perGoroutine - (perGoroutine+2)/3))
	wantCursors(t, readLog(t, s, "alice", 0), 1, succeeded)
	for c := int64(1); c <= succeeded; c++ {
		if !seen[c] {
			t.Errorf("cursor %d is stored but was returned to no successful Update", c)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for g := range goroutines {
			for i := range perGoroutine {
				_, err := tx.User(ctx, fmt.Sprintf("u-%d-%d", g, i))
				if fail := i%3 == 0; fail != errors.Is(err, store.ErrNotFound) {
					t.Errorf("User u-%d-%d: %v (its Update failed: %v)", g, i, err, fail)
				}
			}
		}
		return nil
	})
}

// testViewSnapshot commits an Update while a View is open. A backend with snapshot reads
// lets it commit at once and must keep showing the View the state of its first read; a
// backend that blocks writers during a View lets it commit after. Either way the View
// sees no change.
func testViewSnapshot(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	appendEvents(t, s, "alice", 1)
	written := make(chan error, 1)
	done := false
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		before, err := tx.Cursors(ctx, "alice")
		if err != nil {
			return err
		}
		go func() {
			written <- s.Update(ctx, func(tx store.Tx) error {
				if err := tx.CreateConversation(ctx, newConversation("c1")); err != nil {
					return err
				}
				_, err := tx.AppendEvent(ctx, readEvent("alice", 2))
				return err
			})
		}()
		select {
		case err := <-written:
			if err != nil {
				t.Fatalf("Update beside a View: %v", err)
			}
			done = true
		case <-time.After(500 * time.Millisecond): // the backend holds writers back
		}
		after, err := tx.Cursors(ctx, "alice")
		if err != nil || after != before {
			t.Errorf("Cursors in one View moved from %+v to %+v (%v)", before, after, err)
		}
		if es, err := tx.Events(ctx, "alice", 0, 10); err != nil || len(es) != 1 {
			t.Errorf("Events in the View = %d events, %v; want the 1 of its snapshot", len(es), err)
		}
		_, err = tx.Conversation(ctx, "c1")
		wantErr(t, "Conversation committed after the View's first read", err, store.ErrNotFound)
		return nil
	})
	if !done {
		select {
		case err := <-written:
			if err != nil {
				t.Fatalf("Update after a View: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Update did not finish after the View ended")
		}
	}
	if got := cursorsOf(t, s, "alice"); got.Last != 2 {
		t.Errorf("Cursors after the View = %+v, want Last 2", got)
	}
}

func testViewSeesReturnedUpdate(t *testing.T, s store.Store) {
	for i := range 20 {
		id := fmt.Sprint("u", i)
		createUsers(t, s, id)
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			if _, err := tx.User(ctx, id); err != nil {
				t.Errorf("View right after the Update that created %s: %v", id, err)
			}
			return nil
		})
	}
}

func testClose(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := s.Update(t.Context(), func(tx store.Tx) error { return nil })
	wantErr(t, "Update after Close", err, store.ErrUnavailable)
	err = s.View(t.Context(), func(tx store.ReadTx) error { return nil })
	wantErr(t, "View after Close", err, store.ErrUnavailable)
	wantErr(t, "Close after Close", s.Close(), store.ErrUnavailable)
}
