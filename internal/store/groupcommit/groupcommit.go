// Package groupcommit is the queue in front of an embedded store's single writer. Update
// calls become requests; the writer takes every request already waiting (up to a cap) as
// one batch, runs each fn, commits once (one fsync for the batch) and answers them all.
// Batches are whatever arrived while the previous commit was syncing, so they grow exactly
// when the disk is the bottleneck and a lone request never waits for company.
//
// How a batch runs and commits is the backend's (savepoints in SQLite, an undo log in
// Pebble); the queueing, cancellation and answering rules live here once.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/parleychat/parley/internal/store"
)

// Request states. A request is claimed by the writer or abandoned by its caller, never
// both, so an Update that returns ctx.Err() is sure its fn never ran.
const (
	pending int32 = iota
	claimed
	abandoned
)

// Request is one Update waiting for the writer.
type Request struct {
	ctx   context.Context
	fn    func(store.Tx) error
	state atomic.Int32
	done  chan Outcome // buffered(1): the writer never blocks answering
}

// Context is the caller's context: a backend checks it before each statement rather than
// letting it interrupt one, which would abort the whole shared batch.
func (r *Request) Context() context.Context { return r.ctx }

// Call runs the request's fn with tx, catching a panic so that one bad fn cannot kill the
// writer goroutine (the panic is re-raised on the caller's goroutine).
func (r *Request) Call(tx store.Tx) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			out = Outcome{Panicked: true, PanicVal: v}
		}
	}()
	return Outcome{Err: r.fn(tx)}
}

// Outcome is the writer's answer to one request.
type Outcome struct {
	Err      error
	Panicked bool
	PanicVal any
}

// Failed reports whether fn returned an error or panicked: its writes must be undone.
func (o Outcome) Failed() bool { return o.Err != nil || o.Panicked }

// result returns the request's error, re-raising fn's panic on the caller's goroutine.
func (o Outcome) result() error {
	if o.Panicked {
		panic(o.PanicVal)
	}
	return o.Err
}

// Queue hands requests to one writer goroutine, which calls Run.
type Queue struct {
	reqs      chan *Request
	maxBatch  int
	closedErr error

	mu     sync.RWMutex // guards sending on reqs against Close closing it: senders hold it shared
	closed atomic.Bool  // set once, under mu
}

// NewQueue returns a queue whose batches hold at most maxBatch requests. Submit returns
// closedErr once the queue is closed.
func NewQueue(maxBatch int, closedErr error) *Queue {
	return &Queue{reqs: make(chan *Request, 4*maxBatch), maxBatch: maxBatch, closedErr: closedErr}
}

// Submit queues fn and waits for the writer's answer. If ctx ends before the writer
// reaches the request, Submit returns ctx.Err() and fn never runs; once fn has started,
// Submit waits for the commit and reports its outcome.
func (q *Queue) Submit(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &Request{ctx: ctx, fn: fn, done: make(chan Outcome, 1)}
	if err := q.enqueue(ctx, r); err != nil {
		return err
	}
	select {
	case out := <-r.done:
		return out.result()
	case <-ctx.Done():
		if r.state.CompareAndSwap(pending, abandoned) {
			return ctx.Err()
		}
		return (<-r.done).result()
	}
}

// enqueue hands r to the writer unless the queue is closed.
func (q *Queue) enqueue(ctx context.Context, r *Request) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return q.closedErr
	}
	select {
	case q.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run serves batches until the queue is closed and drained. commit runs one batch and
// returns each request's outcome (nil when none ran) and, if the batch did not commit,
// why: every request whose fn succeeded then gets that error, one whose fn failed keeps
// its own (its writes were undone anyway).
func (q *Queue) Run(commit func(batch []*Request) (outs []Outcome, failed error)) {
	batch := make([]*Request, 0, q.maxBatch)
	for first := range q.reqs {
		batch = q.fill(append(batch[:0], first))
		if live := claim(batch); len(live) > 0 {
			outs, failed := commit(live)
			answer(live, outs, failed)
		}
		clear(batch) // drop references to answered requests
	}
}

// fill appends every request already queued, up to the cap.
func (q *Queue) fill(batch []*Request) []*Request {
	for len(batch) < q.maxBatch {
		select {
		case r, ok := <-q.reqs:
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
func claim(batch []*Request) []*Request {
	live := batch[:0]
	for _, r := range batch {
		if !r.state.CompareAndSwap(pending, claimed) {
			continue // abandoned: its caller has returned
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- Outcome{Err: err}
			continue
		}
		live = append(live, r)
	}
	return live
}

// answer answers every request of the batch; see Run for failed.
func answer(batch []*Request, outs []Outcome, failed error) {
	for i, r := range batch {
		var out Outcome
		if outs != nil {
			out = outs[i]
		}
		if failed != nil && !out.Failed() {
			out.Err = failed
		}
		r.done <- out
	}
}

// Close stops accepting requests; Run returns once it has served those already queued.
// It reports false if the queue was already closed.
func (q *Queue) Close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return false
	}
	q.closed.Store(true)
	close(q.reqs)
	return true
}

// Closed reports whether Close was called.
func (q *Queue) Closed() bool { return q.closed.Load() }

// Waiting returns how many requests are queued and not yet taken by the writer (tests use
// it to know that a batch is ready).
func (q *Queue) Waiting() int { return len(q.reqs) }
