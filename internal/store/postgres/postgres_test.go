package postgres

import (
	"testing"

	"github.com/parleychat/parley/internal/chat/chattest"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
	"github.com/parleychat/parley/internal/store/storetest"
)

// openTest opens a store on the schema named after key and closes it at cleanup.
func openTest(tb testing.TB, key string, opts Options) *Store {
	tb.Helper()
	opts.URL = pgtest.SchemaURL(tb, key)
	if opts.MaxConns == 0 {
		opts.MaxConns = 4 // the suite runs tests in parallel against one server
	}
	s, err := Open(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	pgtest.URL(t) // skip at once, not in every subtest, when there is no server
	storetest.Run(t, storetest.Harness{Open: func(t testing.TB, c storetest.Config) store.Store {
		return openTest(t, c.Dir, Options{MaxBatch: c.MaxBatch})
	}})
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return openTest(b, b.TempDir(), Options{}) })
}

// BenchmarkSend measures chat.Service.Send on this backend; see chattest.BenchSend.
func BenchmarkSend(b *testing.B) {
	chattest.BenchSend(b, func(b *testing.B) store.Store { return openTest(b, b.TempDir(), Options{}) })
}
