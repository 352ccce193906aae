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
	hot   bool
	state atomic.Int32
	done  chan Outcome // buffered(1): the writer never blocks answering
}

// Hot reports whether the request was submitted with SubmitHot: its fn reads what earlier
// batches wrote only through the backend's own memory, so it may run while the previous
// batch is still committing (see RunPipelined).
func (r *Request) Hot() bool { return r.hot }

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
	return q.submit(ctx, fn, false)
}

// SubmitHot is Submit for a fn that reads what earlier batches wrote only through the
// backend's memory (Request.Hot).
func (q *Queue) SubmitHot(ctx context.Context, fn func(store.Tx) error) error {
	return q.submit(ctx, fn, true)
}

func (q *Queue) submit(ctx context.Context, fn func(store.Tx) error, hot bool) error {
	r, err := q.start(ctx, fn, hot)
	if err != nil {
		return err
	}
	return r.wait()
}

// start queues fn and returns without waiting for the writer. The writer takes requests in
// the order they were queued and runs them in that order (Run, RunPipelined), so a request
// queued after another's start returned runs after it.
func (q *Queue) start(ctx context.Context, fn func(store.Tx) error, hot bool) (*Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &Request{ctx: ctx, fn: fn, hot: hot, done: make(chan Outcome, 1)}
	if err := q.enqueue(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// wait waits for the writer's answer to r. If r's context ends before the writer reaches r,
// it returns the context's error and r's fn never runs; once fn has started, it waits for
// the commit and reports its outcome.
func (r *Request) wait() error {
	select {
	case out := <-r.done:
		return out.result()
	case <-r.ctx.Done():
		if r.state.CompareAndSwap(pending, abandoned) {
			return r.ctx.Err()
		}
		return (<-r.done).result()
	}
}

// Append is a store.PendingAppend served by a Queue: the request, and the result its fn
// leaves for Wait.
type Append struct {
	req *Request
	res store.Appended // written by the writer before it answers req
}

var _ store.PendingAppend = (*Append)(nil)

// StartAppend queues apply, the backend's append on the writer (a Hot request when hot, as
// with SubmitHot), and returns once it is queued: it implements store.Store.StartAppend's
// ordering for a backend whose writer runs this queue, since the writer runs requests in
// the order they were queued.
func (q *Queue) StartAppend(ctx context.Context, hot bool, apply func(store.Tx) (store.Appended, error)) (store.PendingAppend, error) {
	a := &Append{}
	r, err := q.start(ctx, func(tx store.Tx) (err error) {
		a.res, err = apply(tx)
		return err
	}, hot)
	if err != nil {
		return nil, err
	}
	a.req = r
	return a, nil
}

// Wait implements store.PendingAppend. A panic of apply is re-raised here.
func (a *Append) Wait() (store.Appended, error) {
	if err := a.req.wait(); err != nil {
		return store.Appended{}, err
	}
	return a.res, nil
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

// Builder is a backend's side of RunPipelined: a batch is built by one or more calls of
// Add, then Seal.
type Builder interface {
	// Add runs the fns of reqs into the batch being built, in order, each seeing the writes
	// of every fn before it, and returns their outcomes. broken reports a batch that can no
	// longer be committed (an undo failed): it is sealed and fails as a whole. settle waits
	// until no commit is in flight: Add calls it before a fn that is not Hot.
	Add(reqs []*Request, settle func()) (outs []Outcome, broken error)
	// Seal ends the batch and returns the function that commits it, which runs on another
	// goroutine while the next batch is built, and returns why the batch did not commit
	// (nil when it did).
	Seal(broken error) (commit func() error)
}

// RunPipelined serves batches until the queue is closed and drained, like Run, but builds
// batch N+1 (runs its fns, on this goroutine) while batch N commits: the CPU work of
// applying requests overlaps the disk's sync. Commits run one at a time, in batch order,
// and each batch's requests are answered when its commit returns. While a commit is in
// flight, requests that arrive join the batch being built, so batches grow with the
// sync's duration as in Run.
func (q *Queue) RunPipelined(b Builder) {
	var inflight chan struct{} // closed when the commit in flight has answered its batch
	settle := func() {
		if inflight != nil {
			<-inflight
		}
	}
	buf := make([]*Request, 0, q.maxBatch)
	for first := range q.reqs {
		var live []*Request
		var outs []Outcome
		var broken error
		add := func(reqs []*Request) {
			reqs = claim(reqs)
			if len(reqs) == 0 || broken != nil {
				answer(reqs, nil, broken)
				return
			}
			o, err := b.Add(reqs, settle)
			live, outs, broken = append(live, reqs...), append(outs, o...), err
		}
		add(q.fill(append(buf[:0], first)))
		for inflight != nil && len(live) < q.maxBatch {
			select {
			case <-inflight: // done already: commit now rather than take more requests
				inflight = nil
				continue
			default:
			}
			select {
			case <-inflight:
				inflight = nil
			case r, ok := <-q.reqs:
				if !ok { // closed: commit what was built once the commit in flight is done
					settle()
					inflight = nil
					break
				}
				add(q.fill(append(buf[:0], r)))
			}
		}
		clear(buf)
		commit := b.Seal(broken)
		settle()
		if len(live) == 0 {
			continue
		}
		done := make(chan struct{})
		inflight = done
		go func() {
			defer close(done)
			answer(live, outs, commit())
		}()
	}
	settle()
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
