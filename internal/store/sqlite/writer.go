package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Request states. A request is claimed by the writer or abandoned by its caller, never
// both, so an Update that returns ctx.Err() is sure its fn never ran.
const (
	pending int32 = iota
	claimed
	abandoned
)

// request is one Update waiting for the writer.
type request struct {
	ctx   context.Context
	fn    func(store.Tx) error
	state atomic.Int32
	done  chan outcome // buffered(1): the writer never blocks answering
}

// outcome is the writer's answer to one request.
type outcome struct {
	err      error
	panicked bool
	panicVal any // fn's panic, re-raised on the caller's goroutine
}

// writer owns the only read-write connection and the statements prepared on it. Only the
// writer goroutine touches its fields after Open.
type writer struct {
	db       *sql.DB
	conn     *sql.Conn
	st       *statements
	maxBatch int
	onCommit func(batch int, d time.Duration)

	// broken is the first ErrUnavailable of the current batch: once set, SQLite may
	// already have rolled the transaction back, so no further statement may run in it.
	broken error
}

// run serves requests until reqs is closed and drained.
func (w *writer) run(reqs <-chan *request) {
	batch := make([]*request, 0, w.maxBatch)
	for first := range reqs {
		batch = fill(append(batch[:0], first), reqs, w.maxBatch)
		w.commit(claim(batch))
		clear(batch) // drop references to answered requests
	}
}

// fill appends every request already queued, up to max: the batch is whatever arrived
// while the previous commit was syncing, so batches grow exactly when the disk is the
// bottleneck and a lone request never waits for company.
func fill(batch []*request, reqs <-chan *request, max int) []*request {
	for len(batch) < max {
		select {
		case r, ok := <-reqs:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// claim keeps the requests whose callers still wait, answering those whose context ended.
func claim(batch []*request) []*request {
	live := batch[:0]
	for _, r := range batch {
		if !r.state.CompareAndSwap(pending, claimed) {
			continue // abandoned: its caller has returned
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- outcome{err: err}
			continue
		}
		live = append(live, r)
	}
	return live
}

// commit runs the batch in one transaction: each request in its own savepoint, then one
// COMMIT (one fsync) for all, then answers every request.
func (w *writer) commit(batch []*request) {
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	w.broken = nil
	if _, err := w.st[stBegin].Exec(); err != nil {
		w.answerAll(batch, nil, batchError(err, "begin batch"))
		return
	}
	outs := make([]outcome, len(batch))
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
		w.answerAll(batch, outs, w.broken)
		return
	}
	if w.onCommit != nil {
		w.onCommit(len(batch), time.Since(start))
	}
	w.answerAll(batch, outs, nil)
}

// runOne runs one request's fn inside a savepoint, undoing only its writes if it fails.
func (w *writer) runOne(r *request) outcome {
	if _, err := w.st[stSavepoint].Exec(); err != nil {
		w.broken = batchError(err, "savepoint")
		return outcome{}
	}
	sc := &scope{w: w}
	out := call(r, writeTx{readTx{q: sc}})
	sc.ended.Store(true)
	end := stRelease
	if out.err != nil || out.panicked {
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

// call runs fn, catching a panic so that one bad fn cannot kill the writer goroutine.
func call(r *request, tx store.Tx) (out outcome) {
	defer func() {
		if v := recover(); v != nil {
			out = outcome{panicked: true, panicVal: v}
		}
	}()
	return outcome{err: r.fn(tx)}
}

// answerAll answers every request of the batch. With failed set, the batch did not
// commit: a request whose fn failed still gets its own error (its writes were undone
// anyway), every other one gets failed.
func (w *writer) answerAll(batch []*request, outs []outcome, failed error) {
	for i, r := range batch {
		var out outcome
		if outs != nil {
			out = outs[i]
		}
		if failed != nil && out.err == nil && !out.panicked {
			out.err = failed
		}
		r.done <- out
	}
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
