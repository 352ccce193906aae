package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// bigContent spans several overflow pages, so each message appends tens of WAL frames.
var bigContent = []byte(`"` + string(bytes.Repeat([]byte("x"), 64<<10)) + `"`)

// sendBig commits one large message per call, n calls from each of senders goroutines
// at once, so that the writer always has a batch queued.
func sendBig(t *testing.T, s *Store, senders, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for range senders {
		wg.Go(func() {
			for range n {
				seq := next.Add(1)
				err := s.Update(t.Context(), func(tx store.Tx) error {
					return tx.InsertMessage(t.Context(), store.Message{ConvID: "c", Seq: seq,
						MsgID: fmt.Sprint("m", seq), ClientMsgID: fmt.Sprint(seq), SenderID: "alice",
						Content: bigContent})
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Update: %v", err)
	}
}

// fileSum is the size and digest of a file.
func fileSum(t *testing.T, path string) (int64, [32]byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(b)), sha256.Sum256(b)
}

// frameBytes is the size of one WAL frame of s: a page and its 24-byte header.
func frameBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	var page int64
	if err := s.w.conn.QueryRowContext(t.Context(), "PRAGMA page_size").Scan(&page); err != nil {
		t.Fatal(err)
	}
	return page + 24
}

// TestCommitsNeverCheckpoint shows that no commit copies the WAL into the database file:
// with the checkpointer never woken, thousands of frames of commits leave the file's
// bytes as they were, where SQLite's automatic checkpoint would have run every 1,000.
func TestCommitsNeverCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir, checkpointFrames: 1 << 30})
	var auto int
	if err := s.w.conn.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Errorf("writer's wal_autocheckpoint = %d, want 0", auto)
	}
	db := filepath.Join(dir, FileName)
	size, sum := fileSum(t, db)
	sendBig(t, s, 4, 50) // 200 messages of 17 pages each
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() < 3000*frameBytes(t, s) {
		t.Fatalf("WAL = %v, %v; want over 3,000 frames, or the test proves nothing", fi.Size(), err)
	}
	if size2, sum2 := fileSum(t, db); size2 != size || sum2 != sum {
		t.Errorf("database file changed (%d -> %d bytes): a commit ran a checkpoint", size, size2)
	}
}

// TestCheckpointerBoundsWAL keeps the writer busy with a queue of large commits and shows
// that the checkpointer copies the WAL into the database file and keeps the log within
// its bound: PASSIVE checkpoints alone never catch up with a writer that never pauses.
func TestCheckpointerBoundsWAL(t *testing.T) {
	const wakeFrames, restartFrames = 200, 1000
	dir := t.TempDir()
	var mu sync.Mutex
	var runs []checkpointRun
	s := openTest(t, Options{Dir: dir, checkpointFrames: wakeFrames, restartFrames: restartFrames,
		onCheckpoint: func(r checkpointRun) {
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, r)
		}})
	db := filepath.Join(dir, FileName)
	size, _ := fileSum(t, db)
	sendBig(t, s, 8, 50) // 400 messages of 17 pages each: 6,800 frames, 7 times the bound

	size2, _ := fileSum(t, db)
	if size2 < size+300*64<<10 {
		t.Errorf("database file grew from %d to %d bytes, want most of the 400 messages copied into it", size, size2)
	}
	// The bound is restartFrames plus what the writer appends while a PASSIVE checkpoint
	// runs, which a slow machine stretches: allow as much again, where an unbounded log
	// would reach about 7,000 frames.
	limit := 2 * restartFrames * frameBytes(t, s)
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() > limit {
		t.Errorf("WAL = %d bytes, %v; want at most %d", fi.Size(), err, limit)
	}
	mu.Lock()
	defer mu.Unlock()
	restarts := 0
	for _, r := range runs {
		if r.Err != nil {
			t.Errorf("checkpoint: %v", r.Err)
		}
		if r.Restart {
			restarts++
		}
	}
	t.Logf("%d checkpoints, %d of them RESTART", len(runs), restarts)
	if restarts == 0 {
		t.Error("no RESTART checkpoint ran")
	}
}

// TestCloseStopsCheckpointer checks that Close ends the checkpointer's goroutine.
func TestCloseStopsCheckpointer(t *testing.T) {
	s, err := Open(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.ckpt.done:
	default:
		t.Error("the checkpointer's goroutine is still running after Close")
	}
}

// TestHeldSnapshotStallsNoWrite holds a View's snapshot open while the writer passes the
// restart bound again and again: each RESTART, which pauses the writer, must give up
// after restartWait rather than wait for the reader for as long as BusyTimeout allows.
func TestHeldSnapshotStallsNoWrite(t *testing.T) {
	const busyTimeout = time.Minute
	var mu sync.Mutex
	var restarts, busy int
	s := openTest(t, Options{BusyTimeout: busyTimeout, checkpointFrames: 200, restartFrames: 1000,
		onCheckpoint: func(r checkpointRun) {
			mu.Lock()
			defer mu.Unlock()
			if r.Restart {
				restarts++
				if r.Busy {
					busy++
				}
			}
		}})
	var wait int64
	if err := s.ckpt.db.QueryRow("PRAGMA busy_timeout").Scan(&wait); err != nil || wait != restartWait.Milliseconds() {
		t.Fatalf("checkpointer's busy_timeout = %d ms, %v; want %d", wait, err, restartWait.Milliseconds())
	}
	// A frame in the log, so that the View's snapshot holds a mark on it.
	if err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.CreateUser(t.Context(), store.User{ID: "alice"})
	}); err != nil {
		t.Fatal(err)
	}
	release, viewDone := holdView(t, s)
	start := time.Now()
	sendBig(t, s, 8, 25) // 3,400 frames: several RESTARTs
	if took := time.Since(start); took >= busyTimeout/2 {
		t.Errorf("the writes took %v with a snapshot held: a RESTART waited for the reader", took)
	}
	close(release)
	if err := <-viewDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if restarts == 0 || busy == 0 {
		t.Errorf("%d RESTART checkpoints, %d of them busy; want the held snapshot to make some busy", restarts, busy)
	}
	if busy > 3400/1000+1 {
		t.Errorf("%d busy RESTART checkpoints, each pausing the writer; want one per 1,000 frames at most", busy)
	}
}

// holdView starts a View that reads, then holds its snapshot until release is closed, and
// returns once the snapshot is taken.
func holdView(t *testing.T, s *Store) (release chan struct{}, done <-chan error) {
	t.Helper()
	return holdInside(t, "the View's snapshot", func(inside func()) error {
		return s.View(t.Context(), func(tx store.ReadTx) error {
			_, err := tx.User(t.Context(), "nobody") // takes the snapshot
			inside()
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
	})
}
