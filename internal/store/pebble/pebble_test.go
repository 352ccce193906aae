//go:build pebble

package pebble

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

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

// holdWriter starts an Update whose fn blocks until release is closed, and returns once
// the writer is inside it. Updates issued meanwhile queue up behind it.
func holdWriter(t *testing.T, s *Store) (release chan struct{}, done <-chan error) {
	t.Helper()
	release = make(chan struct{})
	entered := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.Update(t.Context(), func(tx store.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	select {
	case <-entered:
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

// batchRecorder collects OnCommit batch sizes.
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

// queueInOrder issues one Update per fn, each queued after the one before, so that a held
// writer takes them as one batch in this order. It returns their results in order.
func queueInOrder(t *testing.T, s *Store, fns ...func(tx store.Tx) error) []chan error {
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
		waitFor(t, "the Update to queue", func() bool { return s.q.Waiting() == i+1 })
	}
	return results
}

// state is what the undo-log test compares.
type state struct {
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

func readUndoState(ctx context.Context, tx store.ReadTx) (st state, err error) {
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

func TestUndoLogRestoresOnlyTheFailedRequest(t *testing.T) {
	rec := &batchRecorder{}
	s := openTest(t, Options{OnCommit: rec.onCommit})
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.CreateUser(ctx, store.User{ID: "alice", Name: "Alice", TokenGen: 1})
	}); err != nil {
		t.Fatal(err)
	}
	errFail := errors.New("fail on purpose")
	var afterA, seenByC, seenByE state
	var cursorC, cursorE int64

	release, held := holdWriter(t, s)
	results := queueInOrder(t, s,
		// A succeeds: one write of every kind.
		func(tx store.Tx) error {
			if err := tx.SetTokenGen(ctx, "alice", 5); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead, TS: 10}); err != nil {
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
			afterA, err = readUndoState(ctx, tx)
			return err
		},
		// B overwrites every key A wrote, some of them twice, adds and deletes rows,
		// prunes A's event, then fails.
		func(tx store.Tx) error {
			for _, gen := range []int64{6, 7} {
				if err := tx.SetTokenGen(ctx, "alice", gen); err != nil {
					return err
				}
			}
			for range 2 {
				if _, err := tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead, TS: 20}); err != nil {
					return err
				}
			}
			if n, err := tx.PruneEvents(ctx, 15, 10); err != nil || n != 1 {
				return fmt.Errorf("prune: %d, %v", n, err)
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
			if err := tx.RecallMessage(ctx, "c1", 1); err != nil {
				return err
			}
			if err := tx.InsertMessage(ctx, store.Message{ConvID: "c1", Seq: 2, MsgID: "m2", ClientMsgID: "x2",
				SenderID: "alice"}); err != nil {
				return err
			}
			if err := tx.CreateUser(ctx, store.User{ID: "carol"}); err != nil {
				return err
			}
			return errFail
		},
		// C sees exactly A's state, then appends the cursor B had taken.
		func(tx store.Tx) (err error) {
			if seenByC, err = readUndoState(ctx, tx); err != nil {
				return err
			}
			cursorC, err = tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead, TS: 30})
			return err
		},
		// D overwrites C's and A's writes, then panics.
		func(tx store.Tx) error {
			if err := tx.SetTokenGen(ctx, "alice", 8); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead, TS: 40}); err != nil {
				return err
			}
			if err := tx.DeleteMember(ctx, "c1", "alice"); err != nil {
				return err
			}
			panic("boom")
		},
		// E sees A's and C's writes only.
		func(tx store.Tx) (err error) {
			if seenByE, err = readUndoState(ctx, tx); err != nil {
				return err
			}
			cursorE, err = tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead, TS: 50})
			return err
		},
	)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	want := []string{"<nil>", errFail.Error(), "<nil>", "panic: boom", "<nil>"}
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
	var final state
	err := s.View(ctx, func(tx store.ReadTx) (err error) {
		final, err = readUndoState(ctx, tx)
		return err
	})
	wantFinal := wantE
	wantFinal.Bounds.Last = 3
	wantFinal.Events = []int64{1, 2, 3}
	if err != nil || !reflect.DeepEqual(final, wantFinal) {
		t.Errorf("committed state = %+v, %v\nwant %+v", final, err, wantFinal)
	}
}

func TestGroupCommitBatches(t *testing.T) {
	const queued = 50
	rec := &batchRecorder{}
	s := openTest(t, Options{OnCommit: rec.onCommit})
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
					return errFail
				}
				return nil
			})
		}()
	}
	waitFor(t, "the Updates to queue", func() bool { return s.q.Waiting() == queued })
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
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
	if got, want := rec.get(), []int{1, 1, queued}; !slices.Equal(got, want) {
		t.Errorf("commit batch sizes = %v, want %v: queued Updates must share one commit", got, want)
	}
	var b store.CursorBounds
	err := s.View(ctx, func(tx store.ReadTx) (err error) {
		b, err = tx.Cursors(ctx, "alice")
		return err
	})
	if err != nil || b.Last != queued-queued/10 {
		t.Errorf("Cursors = %+v, %v; want Last %d", b, err, queued-queued/10)
	}
}

func TestGroupCommitUnderLoad(t *testing.T) {
	var commits, updates atomic.Int64
	s := openTest(t, Options{OnCommit: func(n int, _ time.Duration) {
		commits.Add(1)
		updates.Add(int64(n))
	}})
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, store.User{ID: "alice"}) }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				if err := s.Update(ctx, func(tx store.Tx) error {
					_, err := tx.AppendEvent(ctx, store.Event{UserID: "alice", Type: protocol.EventRead})
					return err
				}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if c, u := commits.Load(), updates.Load(); c >= u {
		t.Errorf("%d commits for %d Updates: concurrent Updates must share commits", c, u)
	} else {
		t.Logf("%d commits for %d Updates", c, u)
	}
}

func TestMaxBatchCapsBatches(t *testing.T) {
	rec := &batchRecorder{}
	s := openTest(t, Options{MaxBatch: 4, OnCommit: rec.onCommit})
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
	if got, want := rec.get(), []int{1, 4, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("batch sizes = %v, want %v", got, want)
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
	waitFor(t, "Close to start", func() bool { return s.closed.Load() })
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
	if err := s.Update(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Update after Close = %v, want ErrUnavailable", err)
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

// crashChildEnv names the environment variable that makes TestDurableAcrossSIGKILL's
// re-executed binary the child: it writes into the directory it names, prints each
// acknowledged Update, and kills itself with SIGKILL while Updates are in flight.
const crashChildEnv = "PARLEY_PEBBLE_CRASH_CHILD_DIR"

func TestDurableAcrossSIGKILL(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableAcrossSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, id)
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	if len(acked) < 100 {
		t.Fatalf("child acknowledged %d Updates, want at least 100", len(acked))
	}
	s := openTest(t, Options{Dir: dir})
	ctx := t.Context()
	err = s.View(ctx, func(tx store.ReadTx) error {
		for _, id := range acked {
			if _, err := tx.User(ctx, id); err != nil {
				t.Errorf("acknowledged user %s after SIGKILL: %v", id, err)
			}
		}
		b, err := tx.Cursors(ctx, "log")
		if err != nil {
			return err
		}
		es, err := tx.Events(ctx, "log", 0, 1<<20)
		if err != nil {
			return err
		}
		if int64(len(es)) != b.Last || b.Last < int64(len(acked)) {
			t.Errorf("log has %d events, Last %d, %d acked", len(es), b.Last, len(acked))
		}
		for i, e := range es {
			if e.Cursor != int64(i+1) {
				t.Fatalf("event %d has cursor %d: not gapless after recovery", i, e.Cursor)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// crashChild is the child of TestDurableAcrossSIGKILL.
func crashChild(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, store.User{ID: "log"}) }); err != nil {
		fmt.Println("create:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var n atomic.Int64
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				id := "u" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				err := s.Update(ctx, func(tx store.Tx) error {
					if err := tx.CreateUser(ctx, store.User{ID: id}); err != nil {
						return err
					}
					_, err := tx.AppendEvent(ctx, store.Event{UserID: "log", Type: protocol.EventRead})
					return err
				})
				if err != nil {
					continue
				}
				mu.Lock()
				_, _ = os.Stdout.WriteString("acked " + id + "\n") // unbuffered: one write(2)
				mu.Unlock()
				if n.Add(1) == 300 {
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}
		}()
	}
	select {}
}
