package pebble

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

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
		Queued:             func(s store.Store) int { return s.(*Store).q.Waiting() },
		LosesUpdatesOnKill: opts.Relaxed, // see the package comment on Relaxed
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
	dir := filepath.Join(t.TempDir(), "a?b#c%d", "data")
	openTest(t, Options{Dir: dir})
	for _, d := range []string{dir, filepath.Join(dir, DirName)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatalf("data directory: %v", err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s mode = %v, want 0700", d, perm)
		}
	}
	if _, err := Open(t.Context(), Options{Dir: dir}); err == nil {
		t.Error("a second Open of an open directory succeeded")
	}
}

func TestKeyEncodingOrderAndRoundTrip(t *testing.T) {
	ints := []int64{-1 << 63, -5, -1, 0, 1, 255, 256, 1 << 40, 1<<63 - 1}
	for i := 1; i < len(ints); i++ {
		a, b := appendInt(nil, ints[i-1]), appendInt(nil, ints[i])
		if string(a) >= string(b) {
			t.Errorf("int %d does not sort below %d", ints[i-1], ints[i])
		}
		if got, rest, err := readInt(b); err != nil || got != ints[i] || len(rest) != 0 {
			t.Errorf("readInt(%d) = %d, %v", ints[i], got, err)
		}
	}
	strs := []string{"", "\x00", "\x00\x00", "\x00a", "a", "a\x00", "a\x00b", "ab", "b"}
	for i, s := range strs {
		got, rest, err := readStr(appendStr(nil, s))
		if err != nil || got != s || len(rest) != 0 {
			t.Errorf("readStr(appendStr(%q)) = %q, %v", s, got, err)
		}
		if i > 0 && string(appendStr(nil, strs[i-1])) >= string(appendStr(nil, s)) {
			t.Errorf("enc(%q) does not sort below enc(%q)", strs[i-1], s)
		}
	}
	// A conversation id that extends another never falls inside the other's prefix.
	p := appendStr([]byte{tMessage}, "c1")
	k := messageKey(nil, "c10", 1)
	if string(k) >= string(p) && string(k) < string(prefixEnd(p)) {
		t.Error("message of c10 falls inside the prefix of c1")
	}
}

func TestNewerLayoutIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	if err := s.db.Set(versionKey, appendVarint(nil, layoutVersion+1), pebble.Sync); err != nil {
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

// TestLayout1IsUpgraded: a database of layout 1 (member rows without the standing index)
// gets the index when opened, so that MembersAfter and LastOrdinal see its members.
func TestLayout1IsUpgraded(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openTest(t, Options{Dir: dir})
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i, u := range []string{"bob", "alice", "carol"} {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: int64(3 - i)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Make it layout 1: no o keys, version 1.
	b := s.db.NewBatch()
	if err := b.DeleteRange([]byte{tStanding}, []byte{tStanding + 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(versionKey, appendVarint(nil, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Options{Dir: dir})
	if err := s.View(ctx, func(tx store.ReadTx) error {
		ms, err := tx.MembersAfter(ctx, "c1", 1, 10)
		if err != nil || len(ms) != 2 || ms[0].UserID != "alice" || ms[1].UserID != "bob" {
			t.Errorf("MembersAfter after the upgrade = %+v, %v; want alice, bob", ms, err)
		}
		if n, err := tx.LastOrdinal(ctx, "c1"); err != nil || n != 3 {
			t.Errorf("LastOrdinal after the upgrade = %d, %v; want 3", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestCloseWaitsForViews(t *testing.T) {
	s := openTest(t, Options{})
	ctx := t.Context()
	inView, release := make(chan struct{}), make(chan struct{})
	viewErr := make(chan error, 1)
	go func() {
		viewErr <- s.View(ctx, func(tx store.ReadTx) error {
			close(inView)
			<-release
			_, err := tx.User(ctx, "nobody")
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
	}()
	<-inView
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned during a View: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-viewErr; err != nil {
		t.Errorf("View during Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCommitFailureIsUnavailable(t *testing.T) {
	var failWAL atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failWAL.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	}))
	s, err := Open(t.Context(), Options{Dir: t.TempDir(), fs: fs, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, store.User{ID: "alice"}) }); err != nil {
		t.Fatal(err)
	}
	failWAL.Store(true)
	err = s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, store.User{ID: "bob"}) })
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Update whose commit failed = %v, want ErrUnavailable", err)
	}
	t.Logf("failed commit: %v", err)
	failWAL.Store(false)
	if err := s.Update(ctx, func(tx store.Tx) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Update after a failed commit = %v, want ErrUnavailable", err)
	}
	if err := s.View(ctx, func(tx store.ReadTx) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("View after a failed commit = %v, want ErrUnavailable", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Close after a failed commit = %v, want ErrUnavailable", err)
	}
}

// discardLogger drops the errors a test provokes on purpose.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestPruneLayoutOneEvents: events written by layout 1, each with a time index entry and
// the bounds rewritten, are pruned like new ones, and appends go on after them.
func TestPruneLayoutOneEvents(t *testing.T) {
	s := openTest(t, Options{})
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.CreateUser(ctx, store.User{ID: "alice", Name: "Alice", TokenGen: 1})
	}); err != nil {
		t.Fatal(err)
	}
	// What layout 1's AppendEvent wrote for cursors 1 and 2, at ts 10 and 20.
	b := s.db.NewBatch()
	for c := int64(1); c <= 2; c++ {
		ev := store.Event{UserID: "alice", Type: "read", ConvID: "c1", TS: 10 * c, Data: []byte(`{}`)}
		_ = b.Set(eventKey(nil, "alice", c), encodeEvent(nil, ev), nil)
		_ = b.Set(eventByTimeKey(nil, ev.TS, "alice", c), nil, nil)
	}
	_ = b.Set(boundsKey(nil, "alice"), encodeBounds(nil, store.CursorBounds{Last: 2}), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.PruneEvents(ctx, 15, 100); err != nil || removed != 1 {
		t.Fatalf("PruneEvents = %d, %v; want 1 removed", removed, err)
	}
	var cursor int64
	if err := s.Update(ctx, func(tx store.Tx) (err error) {
		cursor, err = tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: "read", ConvID: "c1", TS: 30, Data: []byte(`{}`)})
		return err
	}); err != nil || cursor != 3 {
		t.Fatalf("AppendEvent after pruning = %d, %v; want cursor 3", cursor, err)
	}
	if err := s.View(ctx, func(tx store.ReadTx) error {
		b, err := tx.Cursors(ctx, "alice")
		if err != nil || b != (store.CursorBounds{Last: 3, Pruned: 1}) {
			t.Errorf("Cursors = %+v, %v; want last 3, pruned 1", b, err)
		}
		evs, err := tx.Events(ctx, "alice", 0, 10)
		if err != nil || len(evs) != 2 || evs[0].Cursor != 2 || evs[1].Cursor != 3 {
			t.Errorf("Events = %+v, %v; want cursors 2 and 3", evs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, closer, err := s.db.Get(eventByTimeKey(nil, 10, "alice", 1)); err == nil {
		closer.Close()
		t.Error("the pruned event's time index entry is still there")
	}
}

// TestDedupAcrossMemtableRotations: once the writer has rotated the memtable and retired
// the keys it held from its fresh set, a retry of an old message is still found (in the
// sstables), as is one sent after a reopen, and new messages keep their seqs.
func TestDedupAcrossMemtableRotations(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir, dedupRotateAt: 8})
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error {
		for _, u := range []string{"alice", "bob"} {
			if err := tx.CreateUser(ctx, store.User{ID: u, TokenGen: 1}); err != nil {
				return err
			}
		}
		if err := tx.CreateConversation(ctx, store.Conversation{ID: "c1", Type: "direct", MembersCount: 2}); err != nil {
			return err
		}
		for i, u := range []string{"alice", "bob"} {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: int64(i)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	msg := func(i int) store.Message {
		return store.Message{ConvID: "c1", SenderID: "alice", MsgID: fmt.Sprint("m", i), ClientMsgID: fmt.Sprint("x", i),
			ContentType: 1, Content: []byte(`1`), CreatedAt: int64(i)}
	}
	const n = 200
	for i := 1; i <= n; i++ {
		res, err := s.AppendMessage(ctx, msg(i))
		if err != nil || res.Duplicate || res.Message.Seq != int64(i) {
			t.Fatalf("append %d = %+v, %v", i, res, err)
		}
	}
	if got := len(s.w.hot.fresh.keys); got >= n/2 {
		t.Fatalf("the fresh set holds %d keys of %d: no rotation retired any", got, n)
	}
	retry := func(s *Store, i int) {
		t.Helper()
		m := msg(i)
		m.MsgID = "other"
		res, err := s.AppendMessage(ctx, m)
		if err != nil || !res.Duplicate || res.Message.Seq != int64(i) || res.Message.MsgID != fmt.Sprint("m", i) {
			t.Errorf("retry of %d = %+v, %v; want the original", i, res, err)
		}
	}
	for _, i := range []int{1, 50, n} {
		retry(s, i)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Options{Dir: dir, dedupRotateAt: 8})
	for _, i := range []int{1, n} {
		retry(s, i)
	}
	if res, err := s.AppendMessage(ctx, msg(n+1)); err != nil || res.Message.Seq != n+1 {
		t.Errorf("append after reopen = %+v, %v; want seq %d", res, err, n+1)
	}
}
