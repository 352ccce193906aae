package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// These tests run on a backend that group-commits (Harness.Queued is set). They hold its
// writer inside one Update, queue more behind it until Queued reports them all waiting,
// then let the writer take them as one batch.

// batchRecorder collects the batch sizes a store reports through Config.OnCommit.
type batchRecorder struct {
	mu      sync.Mutex
	batches []int
}

func (r *batchRecorder) onCommit(n int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, n)
}

func (r *batchRecorder) get() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// openBatching opens a fresh store of a group-committing backend with maxBatch, recording
// its batches; it skips the test for a backend without group commit.
func openBatching(t *testing.T, h Harness, maxBatch int) (store.Store, *batchRecorder) {
	t.Helper()
	skipUnlessBatching(t, h)
	rec := &batchRecorder{}
	return h.Open(t, Config{Dir: t.TempDir(), MaxBatch: maxBatch, OnCommit: rec.onCommit}), rec
}

// skipUnlessBatching skips the test for a backend without group commit.
func skipUnlessBatching(t *testing.T, h Harness) {
	t.Helper()
	if h.Queued == nil {
		t.Skip("the backend does not group-commit (Harness.Queued is nil)")
	}
}

// holdWriter starts an Update whose fn blocks until release is closed, and returns once
// the writer is inside it. Updates issued meanwhile queue up behind it.
func holdWriter(t *testing.T, s store.Store) (release chan struct{}, done <-chan error) {
	t.Helper()
	release = make(chan struct{})
	entered := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.Update(t.Context(), func(store.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("the holding Update returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the writer to run the holding Update")
	}
	return release, errc
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// waitQueued waits until n Updates wait for the writer of s.
func waitQueued(t *testing.T, h Harness, s store.Store, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d Updates to queue", n), func() bool { return h.Queued(s) == n })
}

// queueInOrder issues one Update per fn, each queued after the one before, so that a held
// writer takes them as one batch in this order. It returns their results in order, a
// panic of fn as an error "panic: <value>".
func queueInOrder(t *testing.T, h Harness, s store.Store, fns ...func(tx store.Tx) error) []chan error {
	t.Helper()
	results := make([]chan error, len(fns))
	for i, fn := range fns {
		results[i] = make(chan error, 1)
		go func() {
			defer func() {
				if v := recover(); v != nil {
					results[i] <- fmt.Errorf("panic: %v", v)
				}
			}()
			results[i] <- s.Update(t.Context(), fn)
		}()
		waitQueued(t, h, s, i+1)
	}
	return results
}

// batchState is what testFailedUpdateUndoneAlone compares between the fns of one batch.
type batchState struct {
	Alice     store.User
	Bounds    store.CursorBounds
	Events    []int64
	Members   []store.Member
	Conv      store.Conversation
	Msg1      store.Message
	Msg2Err   bool
	CarolErr  bool
	ByClient2 bool
}

func readBatchState(ctx context.Context, tx store.ReadTx) (st batchState, err error) {
	if st.Alice, err = tx.User(ctx, "alice"); err != nil {
		return st, err
	}
	if st.Bounds, err = tx.Cursors(ctx, "alice"); err != nil {
		return st, err
	}
	es, err := tx.Events(ctx, "alice", 0, 100)
	if err != nil {
		return st, err
	}
	for _, e := range es {
		st.Events = append(st.Events, e.Cursor)
	}
	if st.Members, err = tx.Members(ctx, "c1"); err != nil {
		return st, err
	}
	if st.Conv, err = tx.Conversation(ctx, "c1"); err != nil {
		return st, err
	}
	if st.Msg1, err = tx.Message(ctx, "c1", 1); err != nil {
		return st, err
	}
	_, err = tx.Message(ctx, "c1", 2)
	st.Msg2Err = errors.Is(err, store.ErrNotFound)
	_, err = tx.User(ctx, "carol")
	st.CarolErr = errors.Is(err, store.ErrNotFound)
	_, err = tx.MessageByClientID(ctx, "alice", "x2")
	st.ByClient2 = err == nil
	return st, nil
}

// testFailedUpdateUndoneAlone runs five Updates in one batch: A writes one row of every
// kind; B overwrites all of it (some keys twice), adds and deletes rows, then fails; C
// must see exactly A's state; D overwrites A's and C's writes, then panics; E must see A's
// and C's writes only. Cursors stay gapless over the undone ones.
func testFailedUpdateUndoneAlone(t *testing.T, h Harness) {
	s, rec := openBatching(t, h, 0)
	ctx := t.Context()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.CreateUser(ctx, store.User{ID: "alice", Name: "Alice", TokenGen: 1})
	})
	readEv := func(ts int64) store.Event { return store.Event{UserID: "alice", Type: protocol.EventRead, TS: ts} }
	var afterA, seenByC, seenByE batchState
	var cursorC, cursorE int64

	release, held := holdWriter(t, s)
	results := queueInOrder(t, h, s,
		func(tx store.Tx) error { // A
			if err := tx.SetTokenGen(ctx, "alice", 5); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, readEv(10)); err != nil {
				return err
			}
			if err := tx.CreateConversation(ctx, store.Conversation{ID: "c1", Name: "A"}); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice", Ordinal: 1}); err != nil {
				return err
			}
			if err := tx.InsertMessage(ctx, store.Message{ConvID: "c1", Seq: 1, MsgID: "m1", ClientMsgID: "x1",
				SenderID: "alice", Content: []byte(`"a"`)}); err != nil {
				return err
			}
			var err error
			afterA, err = readBatchState(ctx, tx)
			return err
		},
		func(tx store.Tx) error { // B
			for _, gen := range []int64{6, 7} {
				if err := tx.SetTokenGen(ctx, "alice", gen); err != nil {
					return err
				}
			}
			for range 2 {
				if _, err := tx.AppendEvent(ctx, readEv(20)); err != nil {
					return err
				}
			}
			if err := tx.UpdateConversation(ctx, store.Conversation{ID: "c1", Name: "B", MaxSeq: 9}); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice", Ordinal: 9}); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "bob", Ordinal: 2}); err != nil {
				return err
			}
			if err := tx.DeleteMember(ctx, "c1", "alice"); err != nil {
				return err
			}
			if err := tx.RecallMessage(ctx, "c1", 1, 1_700_000_009_000); err != nil {
				return err
			}
			if err := tx.InsertMessage(ctx, store.Message{ConvID: "c1", Seq: 2, MsgID: "m2", ClientMsgID: "x2",
				SenderID: "alice"}); err != nil {
				return err
			}
			if err := tx.CreateUser(ctx, store.User{ID: "carol"}); err != nil {
				return err
			}
			return errTest
		},
		func(tx store.Tx) (err error) { // C
			if seenByC, err = readBatchState(ctx, tx); err != nil {
				return err
			}
			cursorC, err = tx.AppendEvent(ctx, readEv(30))
			return err
		},
		func(tx store.Tx) error { // D
			if err := tx.SetTokenGen(ctx, "alice", 8); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, readEv(40)); err != nil {
				return err
			}
			if err := tx.DeleteMember(ctx, "c1", "alice"); err != nil {
				return err
			}
			panic("boom")
		},
		func(tx store.Tx) (err error) { // E
			if seenByE, err = readBatchState(ctx, tx); err != nil {
				return err
			}
			cursorE, err = tx.AppendEvent(ctx, readEv(50))
			return err
		},
	)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	want := []string{"<nil>", errTest.Error(), "<nil>", "panic: boom", "<nil>"}
	for i, r := range results {
		if got := fmt.Sprint(<-r); got != want[i] {
			t.Errorf("Update %c = %s, want %s", 'A'+i, got, want[i])
		}
	}
	if got := rec.get(); !slices.Equal(got, []int{1, 1, 5}) {
		t.Errorf("batches = %v, want [1 1 5]: the five Updates must share one commit", got)
	}

	if afterA.Alice.TokenGen != 5 || !slices.Equal(afterA.Events, []int64{1}) || afterA.Conv.Name != "A" ||
		len(afterA.Members) != 1 || afterA.Msg1.Recalled || !afterA.Msg2Err || !afterA.CarolErr || afterA.ByClient2 {
		t.Fatalf("state after A = %+v", afterA)
	}
	if !reflect.DeepEqual(seenByC, afterA) {
		t.Errorf("C saw %+v\nwant A's state %+v", seenByC, afterA)
	}
	if cursorC != 2 || cursorE != 3 {
		t.Errorf("cursors of C and E = %d, %d; want 2, 3 (gapless over the undone ones)", cursorC, cursorE)
	}
	wantE := afterA
	wantE.Bounds.Last = 2
	wantE.Events = []int64{1, 2}
	if !reflect.DeepEqual(seenByE, wantE) {
		t.Errorf("E saw %+v\nwant %+v", seenByE, wantE)
	}
	var final batchState
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
		final, err = readBatchState(ctx, tx)
		return err
	})
	wantFinal := wantE
	wantFinal.Bounds.Last = 3
	wantFinal.Events = []int64{1, 2, 3}
	if !reflect.DeepEqual(final, wantFinal) {
		t.Errorf("committed state = %+v\nwant %+v", final, wantFinal)
	}
}

// testQueuedUpdatesShareACommit queues many Updates, one in ten failing, behind a held
// writer: they commit as one batch, each failure undone alone.
func testQueuedUpdatesShareACommit(t *testing.T, h Harness) {
	const queued = 50
	s, rec := openBatching(t, h, 0)
	ctx := t.Context()
	createUsers(t, s, "alice")
	release, held := holdWriter(t, s)
	results := make(chan error, queued)
	for i := range queued {
		go func() {
			results <- s.Update(ctx, func(tx store.Tx) error {
				if _, err := tx.AppendEvent(ctx, readEvent("alice", int64(i))); err != nil {
					return err
				}
				if i%10 == 0 {
					return errTest
				}
				return nil
			})
		}()
	}
	waitQueued(t, h, s, queued)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holding Update: %v", err)
	}
	failed := 0
	for range queued {
		switch err := <-results; {
		case errors.Is(err, errTest):
			failed++
		case err != nil:
			t.Errorf("Update: %v", err)
		}
	}
	if failed != queued/10 {
		t.Errorf("%d Updates failed, want %d", failed, queued/10)
	}
	if got, want := rec.get(), []int{1, 1, queued}; !slices.Equal(got, want) {
		t.Errorf("commit batch sizes = %v, want %v: queued Updates must share one commit", got, want)
	}
	wantCursors(t, readLog(t, s, "alice", 0), 1, queued-queued/10)
}

// testMaxBatchCapsBatches: ten queued Updates with MaxBatch 4 commit as 4, 4 and 2.
func testMaxBatchCapsBatches(t *testing.T, h Harness) {
	s, rec := openBatching(t, h, 4)
	release, held := holdWriter(t, s)
	results := make(chan error, 10)
	for range 10 {
		go func() { results <- s.Update(t.Context(), func(store.Tx) error { return nil }) }()
	}
	waitQueued(t, h, s, 10)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holding Update: %v", err)
	}
	for range 10 {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	if got, want := rec.get(), []int{1, 4, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("batch sizes = %v, want %v", got, want)
	}
}

// testGroupCommitUnderLoad: Updates issued concurrently, with no writer held, still share
// commits.
func testGroupCommitUnderLoad(t *testing.T, h Harness) {
	skipUnlessBatching(t, h)
	var commits, updates atomic.Int64
	s := h.Open(t, Config{Dir: t.TempDir(), OnCommit: func(n int, _ time.Duration) {
		commits.Add(1)
		updates.Add(int64(n))
	}})
	createUsers(t, s, "alice")
	runConcurrently(32, 20, func(g, i int) {
		err := s.Update(t.Context(), func(tx store.Tx) error {
			_, err := tx.AppendEvent(t.Context(), readEvent("alice", int64(i)))
			return err
		})
		if err != nil {
			t.Errorf("goroutine %d, Update %d: %v", g, i, err)
		}
	})
	if c, u := commits.Load(), updates.Load(); c >= u {
		t.Errorf("%d commits for %d Updates: concurrent Updates must share commits", c, u)
	} else {
		t.Logf("%d commits for %d Updates", c, u)
	}
}

// testCloseDrainsQueuedUpdates: Updates queued when Close is called still commit, durably,
// before Close returns.
func testCloseDrainsQueuedUpdates(t *testing.T, h Harness) {
	skipUnlessBatching(t, h)
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	ctx := t.Context()
	release, held := holdWriter(t, s)
	ids := []string{"a", "b", "c", "d", "e"}
	results := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			results <- s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, newUser(id)) })
		}()
	}
	waitQueued(t, h, s, len(ids))
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waitFor(t, "Close to start", func() bool {
		return errors.Is(s.View(ctx, func(store.ReadTx) error { return nil }), store.ErrUnavailable)
	})
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holding Update: %v", err)
	}
	for range ids {
		if err := <-results; err != nil {
			t.Errorf("Update queued before Close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := s.Update(ctx, func(store.Tx) error { return nil })
	wantErr(t, "Update after Close", err, store.ErrUnavailable)
	view(t, h.Open(t, Config{Dir: dir}), func(ctx context.Context, tx store.ReadTx) error {
		for _, id := range ids {
			if _, err := tx.User(ctx, id); err != nil {
				t.Errorf("after reopen, User %s created by an Update drained by Close: %v", id, err)
			}
		}
		return nil
	})
}
