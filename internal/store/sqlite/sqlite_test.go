package sqlite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat/chattest"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/storetest"
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
