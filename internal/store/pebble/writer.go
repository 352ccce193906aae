package pebble

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/groupcommit"
)

// writer owns the write path: it is the groupcommit.Builder of the Store's queue, which
// builds one batch on the queue's goroutine while the previous one commits on another.
// Only the queue's goroutine touches its fields after Open, except those marked.
type writer struct {
	db       *pebble.DB
	sync     *pebble.WriteOptions
	onCommit func(batch int, d time.Duration)
	publish  func()                 // installs the snapshot Views read; see Store.publish
	failed   *atomic.Pointer[error] // set on a commit failure, read by the Store too

	// committed is the number of the last batch whose commit returned (batches are
	// numbered from 1 as they are built); read by AppendMessage's callers.
	committed atomic.Int64

	b      *pebble.Batch // the batch being built; nil between Seal and the next Add
	built  int64         // the number of the batch being built, or of the last one sealed
	n      int           // requests run into b
	start  time.Time     // when b was started
	settle func()        // waits until no commit is in flight (groupcommit.Builder.Add)
	// republish makes the batch being built publish a new snapshot even if it writes
	// nothing: set by a request after a write that did not go through the writer.
	republish bool

	undo    undoLog // the undo log of the running request, reused
	bufs    txnBufs // scratch buffers handed from one request's txn to the next
	hot     hotState
	scratch appendScratch
	// lastMark is the store's latest mark (store.MarkReader), as the batch being built has
	// it: read at Open, raised by each append to a read-fanout conversation.
	lastMark int64
}

var _ groupcommit.Builder = (*writer)(nil)

// Add implements groupcommit.Builder: it runs each request's fn against the indexed batch
// being built, in which each fn reads its own writes and those of the fns before it. A fn
// that is not Hot reads the store, so it first waits until the commit in flight is done:
// the batch being built reads through to the database, which holds the previous batch only
// once it committed. Hot requests (AppendMessage) read from the hot state instead, and
// settle themselves before any read they must make (see hotState).
func (w *writer) Add(reqs []*groupcommit.Request, settle func()) ([]groupcommit.Outcome, error) {
	outs := make([]groupcommit.Outcome, len(reqs))
	if p := w.failed.Load(); p != nil {
		return outs, *p
	}
	if w.b == nil {
		w.b, w.n, w.start = w.db.NewIndexedBatch(), 0, time.Now()
		w.built++
		w.hot.trim()
		w.hot.fresh.maintain(w.db, w.built-1, settle)
	}
	w.settle, w.hot.settle = settle, settle
	for i, r := range reqs {
		if !r.Hot() {
			settle()
		}
		var broken error
		outs[i], broken = w.runOne(w.b, r)
		w.n++
		if broken != nil {
			return outs, broken
		}
	}
	return outs, nil
}

// Seal implements groupcommit.Builder: the returned function commits the batch with one
// WAL write (and one fsync unless relaxed) and publishes the new state to Views. A broken
// batch (an undo that could not be applied) is not committed, and as the hot state may
// then describe writes that will never be, the store refuses everything from then on.
func (w *writer) Seal(broken error) func() error {
	b, n, count, start, republish := w.b, w.built, w.n, w.start, w.republish
	w.b, w.republish = nil, false
	w.hot.fresh.seal(n)
	if broken != nil {
		w.failed.Store(&broken)
	}
	if b == nil {
		return func() error { return broken }
	}
	if broken != nil {
		_ = b.Close()
		return func() error { return broken }
	}
	return func() error { return w.commit(b, n, count, start, republish) }
}

// commit commits batch number n of count requests. It runs on the queue's commit
// goroutine, one batch at a time.
func (w *writer) commit(b *pebble.Batch, n int64, count int, start time.Time, republish bool) error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	if !b.Empty() {
		if err := w.apply(b); err != nil {
			// Pebble's commit pipeline is unusable after a failed commit, and the batch
			// may even be in the memtable: refuse everything from now on. The batch is
			// not closed, as Pebble may still reference it.
			w.failed.Store(&err)
			return err
		}
	}
	if !b.Empty() || republish {
		w.publish()
	}
	_ = b.Close()
	w.committed.Store(n)
	if w.onCommit != nil {
		w.onCommit(count, time.Since(start))
	}
	return nil
}

// apply commits b, turning Pebble's fatal commit error (our logger's Fatalf panics, see
// quietLogger) or any other panic of the commit into an error wrapping ErrUnavailable.
func (w *writer) apply(b *pebble.Batch) error { return commitBatch(b, w.sync) }

// commitBatch commits b with opts, turning a panic of the commit (see apply) into an error
// wrapping ErrUnavailable.
func commitBatch(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: pebble: commit batch: %v", store.ErrUnavailable, v)
		}
	}()
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("%w: pebble: commit batch: %w", store.ErrUnavailable, err)
	}
	return nil
}

// runOne runs one request's fn against the shared batch; if fn fails or panics, it
// replays the request's undo log so that the batch is as the previous request left it.
// broken reports an undo that could not be applied.
func (w *writer) runOne(b *pebble.Batch, r *groupcommit.Request) (out groupcommit.Outcome, broken error) {
	w.undo.reset()
	t := &txn{r: b, b: b, undo: &w.undo, hot: &w.hot, txnBufs: w.bufs}
	out = r.Call(writeTx{readTx{t}})
	t.ended.Store(true)
	w.bufs = t.txnBufs // keep grown buffers for the next request
	if !out.Failed() {
		return out, nil
	}
	if err := w.undo.rollback(b); err != nil {
		return out, fmt.Errorf("%w: pebble: undo a failed update: %w", store.ErrUnavailable, err)
	}
	return out, nil
}

// undoLog records, for every write of the running request, the key and what it held
// before (a value, or nothing). Keys and values are copied into one arena, referenced by
// offset, so recording costs no allocation once the arena has grown.
type undoLog struct {
	arena   []byte
	entries []undoEntry
}

type undoEntry struct {
	key, val [2]int // [start, end) in arena
	existed  bool
}

// maxRetained caps the arena kept between requests, so that one huge request does not pin
// its memory forever.
const maxRetained = 1 << 20

func (u *undoLog) reset() {
	if cap(u.arena) > maxRetained {
		u.arena = nil
	}
	if cap(u.entries) > maxRetained/32 {
		u.entries = nil
	}
	u.arena, u.entries = u.arena[:0], u.entries[:0]
}

// record notes that key held prev (existed) or nothing (!existed) before this write.
func (u *undoLog) record(key, prev []byte, existed bool) {
	e := undoEntry{existed: existed}
	e.key[0] = len(u.arena)
	u.arena = append(u.arena, key...)
	e.key[1] = len(u.arena)
	e.val[0] = e.key[1]
	if existed {
		u.arena = append(u.arena, prev...)
	}
	e.val[1] = len(u.arena)
	u.entries = append(u.entries, e)
}

// rollback restores, newest write first, what every recorded key held before the request.
// A key written twice is restored twice, ending at its value before the first write.
func (u *undoLog) rollback(b *pebble.Batch) error {
	for i := len(u.entries) - 1; i >= 0; i-- {
		e := u.entries[i]
		key := u.arena[e.key[0]:e.key[1]]
		var err error
		if e.existed {
			err = b.Set(key, u.arena[e.val[0]:e.val[1]], nil)
		} else {
			err = b.Delete(key, nil)
		}
		if err != nil {
			return err
		}
	}
	u.entries = u.entries[:0]
	return nil
}

// fatalError is the panic value of quietLogger.Fatalf.
type fatalError string

func (e fatalError) Error() string { return string(e) }

// Is makes a recovered fatal error count as unavailability.
func (e fatalError) Is(target error) bool { return target == store.ErrUnavailable }

// quietLogger is Pebble's logger: informational messages (every flush, compaction and WAL
// rotation) are dropped, errors go to slog, and a fatal error logs and panics rather than
// exiting, so that the writer can turn a failed commit into ErrUnavailable.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(string, ...any) {}

func (q quietLogger) Errorf(format string, args ...any) {
	q.l.Error(prefixed(format, args))
}

func (q quietLogger) Fatalf(format string, args ...any) {
	msg := prefixed(format, args)
	q.l.Error(msg, slog.Bool("fatal", true))
	panic(fatalError(msg))
}

// prefixed formats a Pebble message, naming Pebble unless the message already does.
func prefixed(format string, args []any) string {
	msg := fmt.Sprintf(format, args...)
	if strings.HasPrefix(msg, "pebble") {
		return msg
	}
	return "pebble: " + msg
}

var _ pebble.Logger = quietLogger{}

// errTxDone reports a Tx used after its Update or View returned.
var errTxDone = errors.New("pebble: transaction used after its Update or View returned")
