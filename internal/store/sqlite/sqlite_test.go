package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat/chattest"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/storetest"
	"github.com/parleychat/parley/protocol"
)

// openTest opens a store in a fresh directory and closes it at cleanup.
func openTest(tb testing.TB, opts Options) *Store {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	s, err := Open(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() }) // the suite's Close test closes it first
	return s
}

// harness opens stores with opts for the conformance suite.
func harness(opts Options) storetest.Harness {
	return storetest.Harness{
		Open: func(t testing.TB, c storetest.Config) store.Store {
			o := opts
			o.Dir, o.MaxBatch, o.OnCommit = c.Dir, c.MaxBatch, c.OnCommit
			return openTest(t, o)
		},
		Queued: func(s store.Store) int { return s.(*Store).q.Waiting() },
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness(Options{})) }

func TestConformanceRelaxed(t *testing.T) { storetest.Run(t, harness(Options{Relaxed: true})) }

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return openTest(b, Options{}) })
}

func BenchmarkStoreRelaxed(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return openTest(b, Options{Relaxed: true}) })
}

// BenchmarkSend measures chat.Service.Send on this backend in its durable mode; see
// chattest.BenchSend.
func BenchmarkSend(b *testing.B) {
	chattest.BenchSend(b, func(b *testing.B) store.Store { return openTest(b, Options{}) })
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(t.Context(), Options{}); err == nil {
		t.Error("Open without Dir succeeded")
	}
	if _, err := Open(t.Context(), Options{Dir: t.TempDir(), MaxBatch: -1}); err == nil {
		t.Error("Open with a negative MaxBatch succeeded")
	}
	dir := filepath.Join(t.TempDir(), "a?b#c%d", "data") // URI-special characters
	openTest(t, Options{Dir: dir})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("data directory: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode = %v, want 0700", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Errorf("database file: %v", err)
	}
}

// TestMigrateIsIdempotent runs the migrations again on a database Open has brought up
// to date. (That a reopened store keeps its data is the conformance suite's
// Lifecycle/ReopenKeepsEverything.)
func TestMigrateIsIdempotent(t *testing.T) {
	s := openTest(t, Options{})
	ctx := t.Context()
	if err := migrate(ctx, s.w.conn); err != nil {
		t.Fatalf("migrate on an up-to-date database: %v", err)
	}
	if v, err := schemaVersion(ctx, s.w.conn); err != nil || v != len(migrations()) {
		t.Errorf("schema version = %d, %v; want %d", v, err, len(migrations()))
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	if _, err := s.w.conn.ExecContext(t.Context(), `PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(t.Context(), Options{Dir: dir}); err == nil {
		_ = s2.Close()
		t.Fatal("Open of a database from a newer binary succeeded")
	}
}

// holdWriter starts an Update whose fn blocks until release is closed, and returns once
// the writer is inside it. Updates issued meanwhile queue up behind it.
func holdWriter(t *testing.T, s *Store) (release chan struct{}, done <-chan error) {
	t.Helper()
	return holdInside(t, "the writer to run the holding Update", func(inside func()) error {
		return s.Update(t.Context(), func(tx store.Tx) error {
			inside()
			return nil
		})
	})
}

// holdInside runs call on a goroutine; call calls inside, which blocks until release is
// closed. holdInside returns once inside was called, and done reports call's error.
func holdInside(t *testing.T, what string, call func(inside func()) error) (release chan struct{}, done <-chan error) {
	t.Helper()
	release = make(chan struct{})
	entered := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- call(func() {
			close(entered)
			<-release
		})
	}()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("%s: returned early: %v", what, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
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

func TestGroupCommitBatches(t *testing.T) {
	const queued = 50
	var mu sync.Mutex
	var batches []int
	s := openTest(t, Options{OnCommit: func(n int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, n)
	}})
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.CreateUser(ctx, store.User{ID: "alice"})
	}); err != nil {
		t.Fatal(err)
	}

	release, held := holdWriter(t, s)
	errFail := errors.New("fail on purpose")
	results := make(chan error, queued)
	for i := range queued {
		go func() {
			results <- s.Update(ctx, func(tx store.Tx) error {
				if _, err := tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead}); err != nil {
					return err
				}
				if i%10 == 0 {
					return errFail // undone alone, inside the shared transaction
				}
				return nil
			})
		}()
	}
	waitFor(t, "the Updates to queue", func() bool { return s.q.Waiting() == queued })
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holding Update: %v", err)
	}
	failed := 0
	for range queued {
		switch err := <-results; {
		case errors.Is(err, errFail):
			failed++
		case err != nil:
			t.Errorf("Update: %v", err)
		}
	}
	if failed != queued/10 {
		t.Errorf("%d Updates failed, want %d", failed, queued/10)
	}

	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 1, queued}; !slices.Equal(batches, want) {
		t.Errorf("commit batch sizes = %v, want %v: queued Updates must share one commit", batches, want)
	}
	var b store.CursorBounds
	err := s.View(ctx, func(tx store.ReadTx) (err error) {
		b, err = tx.Cursors(ctx, "alice")
		return err
	})
	if err != nil || b.Last != queued-queued/10 {
		t.Errorf("Cursors = %+v, %v; want Last %d (gapless over the failures)", b, err, queued-queued/10)
	}
}

func TestMaxBatchCapsBatches(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	s := openTest(t, Options{MaxBatch: 4, OnCommit: func(n int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, n)
	}})
	release, held := holdWriter(t, s)
	results := make(chan error, 10)
	for range 10 {
		go func() { results <- s.Update(t.Context(), func(store.Tx) error { return nil }) }()
	}
	waitFor(t, "the Updates to queue", func() bool { return s.q.Waiting() == 10 })
	close(release)
	<-held
	for range 10 {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 4, 4, 2}; !slices.Equal(batches, want) {
		t.Errorf("batch sizes = %v, want %v", batches, want)
	}
}

func TestCloseDrainsQueuedUpdates(t *testing.T) {
	s := openTest(t, Options{})
	ctx := t.Context()
	release, held := holdWriter(t, s)
	results := make(chan error, 5)
	for i := range 5 {
		go func() {
			results <- s.Update(ctx, func(tx store.Tx) error {
				return tx.CreateUser(ctx, store.User{ID: string(rune('a' + i))})
			})
		}()
	}
	waitFor(t, "the Updates to queue", func() bool { return s.q.Waiting() == 5 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waitFor(t, "Close to start", func() bool { return s.q.Closed() })
	close(release)
	<-held
	for range 5 {
		if err := <-results; err != nil {
			t.Errorf("Update queued before Close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
