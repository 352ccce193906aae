package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	modernc "modernc.org/sqlite"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/groupcommit"
)

// writer owns the only read-write connection and the statements prepared on it. Only the
// writer goroutine touches its fields after Open, except mu.
type writer struct {
	// mu is held for each batch, from BEGIN to COMMIT; the checkpointer takes it to pause
	// the writer between batches.
	mu sync.Mutex

	db       *sql.DB
	conn     *sql.Conn
	st       *statements
	onCommit func(batch int, d time.Duration)

	// wakeCheckpointer is called, without waiting, once the commits since the last call
	// have appended checkpointFrames frames to the WAL; unchecked counts them.
	wakeCheckpointer func()
	checkpointFrames int
	unchecked        int

	// broken is the first ErrUnavailable of the current batch: once set, SQLite may
	// already have rolled the transaction back, so no further statement may run in it.
	broken error
}

// commit runs the batch in one transaction: each request in its own savepoint, then one
// COMMIT (one fsync) for all. It returns each request's outcome and, if the batch did not
// commit, why (groupcommit.Queue.Run answers the requests).
func (w *writer) commit(batch []*groupcommit.Request) ([]groupcommit.Outcome, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := time.Now()
	w.broken = nil
	if _, err := w.st[stBegin].Exec(); err != nil {
		return nil, batchError(err, "begin batch")
	}
	outs := make([]groupcommit.Outcome, len(batch))
	for i, r := range batch {
		if outs[i] = w.runOne(r); w.broken != nil {
			break
		}
	}
	if w.broken == nil {
		if _, err := w.st[stCommit].Exec(); err != nil {
			w.broken = batchError(err, "commit batch")
		}
	}
	if w.broken != nil {
		_, _ = w.st[stRollback].Exec() // fails harmlessly if SQLite already rolled back
		return outs, w.broken
	}
	if w.onCommit != nil {
		w.onCommit(len(batch), time.Since(start))
	}
	w.countFrames()
	return outs, nil
}

// countFrames adds the frames the last commit appended to the WAL (SQLite counts the
// pages a connection writes, and in WAL mode it writes only log frames) and wakes the
// checkpointer when they reach its threshold.
func (w *writer) countFrames() {
	err := w.conn.Raw(func(dc any) error {
		n, _, err := dc.(modernc.DBStatus).Status(modernc.DBStatusCacheWrite, true)
		w.unchecked += n
		return err
	})
	if err != nil || w.unchecked >= w.checkpointFrames {
		w.unchecked = 0 // on an error, checkpoint rather than let the log grow unseen
		w.wakeCheckpointer()
	}
}

// runOne runs one request's fn inside a savepoint, undoing only its writes if it fails.
func (w *writer) runOne(r *groupcommit.Request) groupcommit.Outcome {
	if _, err := w.st[stSavepoint].Exec(); err != nil {
		w.broken = batchError(err, "savepoint")
		return groupcommit.Outcome{}
	}
	sc := &scope{w: w}
	out := r.Call(writeTx{readTx{q: sc}})
	sc.ended.Store(true)
	end := stRelease
	if out.Failed() {
		end = stRollbackTo
	}
	if _, err := w.st[end].Exec(); err != nil {
		w.broken = batchError(err, "end savepoint")
		return out
	}
	if end == stRollbackTo {
		if _, err := w.st[stRelease].Exec(); err != nil {
			w.broken = batchError(err, "release savepoint")
		}
	}
	return out
}

// batchError is the error of a failed transaction-control statement: whatever the cause,
// the batch did not commit, which callers must see as ErrUnavailable.
func batchError(err error, what string) error {
	err = translate(err, what)
	if errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// close releases the statements and the connection.
func (w *writer) close() error {
	return errors.Join(w.st.close(), w.conn.Close(), w.db.Close())
}

// scope is the runner of one request inside a batch. Statements run without the caller's
// cancellation: an interrupted statement would make SQLite roll back the whole shared
// transaction, so a done context is instead checked before each statement.
type scope struct {
	w     *writer
	ended atomic.Bool // set when fn has returned: a kept tx must not write into later batches
}

// check refuses statements once the batch is broken, fn has returned, or ctx is done.
func (s *scope) check(ctx context.Context) error {
	switch {
	case s.ended.Load():
		return fmt.Errorf("sqlite: transaction used after its Update returned: %w", sql.ErrTxDone)
	case s.w.broken != nil:
		return s.w.broken
	}
	return ctx.Err()
}

func (s *scope) exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.w.st[id].ExecContext(context.WithoutCancel(ctx), args...)
}

func (s *scope) query(ctx context.Context, id stmtID, args ...any) (*sql.Rows, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.w.st[id].QueryContext(context.WithoutCancel(ctx), args...)
}

func (s *scope) queryRow(ctx context.Context, id stmtID, args ...any) rowScanner {
	if err := s.check(ctx); err != nil {
		return errRow{err}
	}
	return s.w.st[id].QueryRowContext(context.WithoutCancel(ctx), args...)
}

// errRow is a row whose Scan reports why its statement did not run.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (s *scope) fail(err error, format string, args ...any) error {
	err = translate(err, fmt.Sprintf(format, args...))
	if errors.Is(err, store.ErrUnavailable) && s.w.broken == nil {
		s.w.broken = err
	}
	return err
}
