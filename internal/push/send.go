package push

// This file is how the pusher sends one notification: a request slot at its origin, the
// origin's breaker, the deadline, and the worker's hand-over when a service is slow.

import (
	"context"
	"sync/atomic"
	"time"
)

// DefaultSendTimeout bounds one provider request, whole: sent, answered, and its body read.
// A service that answers its headers and then drips the body is cut off at it, like one
// that never answers; the outcome is a Retry.
const DefaultSendTimeout = 10 * time.Second

// detachAfter is how long a worker waits on one provider request before it hands its place
// to a new worker and goes on waiting alone: a slow push service then holds a goroutine,
// not one of the workers that every other user's pushes need. Healthy services answer
// well within it.
const detachAfter = 500 * time.Millisecond

// detachedPerWorker bounds the requests waited on apart from the workers: at most this many
// times Workers. Past it a slow request keeps its worker until
// its deadline.
const detachedPerWorker = 8

// worker is one goroutine of the pool that work runs on.
type worker struct {
	// detached is set when the worker handed its place to a new one while it waited on a
	// slow request (detach): it finishes its user, then ends.
	detached atomic.Bool
}

// attempt sends n to d's origin once, if the origin has a request slot (OriginShare) and
// its breaker lets it, and records the answer in the breaker. sent is false when nothing
// was sent: res.Outcome is then Retry when the origin had no slot (d's user is woken when
// one frees), else the breaker parked the user. opened reports that this failure opened the
// breaker (or failed its probe): the user is parked.
func (w *pass) attempt(d *deviceState, prov Provider, n Notification, gaveUp bool) (res Result, opened, sent bool) {
	p := w.p
	o := p.origins.acquire(d.origin, d.limited, w.uid)
	if o == nil {
		return Result{Outcome: Retry}, false, false
	}
	defer p.release(d.origin)
	if !o.br.admit(w.uid, w.now) {
		return Result{Outcome: Rejected}, false, false
	}
	res = p.request(w.ctx, w.wk, prov, Target{UserID: w.uid, DeviceID: d.t.DeviceID, Provider: d.t.Provider, Token: d.t.Token,
		Topic: d.t.Topic, Locale: d.t.Locale, RegisteredAt: time.UnixMilli(d.t.RegisteredAt)}, n)
	switch {
	case res.Outcome != Retry:
		for _, u := range o.br.answered() {
			p.wake(u)
		}
	case w.ctx.Err() == nil && !gaveUp:
		opened = o.br.failed(w.uid, w.now, p.wake)
	}
	return res, opened, true
}

// release frees a request slot of origin and queues the user that waited for one.
func (p *Pusher) release(origin string) {
	uid := p.origins.release(origin)
	if uid == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[uid]; u != nil {
		p.enqueueLocked(u)
	}
}

// request sends n once, bounded by SendTimeout (the answer's body included). When wk is a
// worker and the request is still unanswered after detachAfter, wk's place goes to a new
// worker (detach), so that a slow service holds this goroutine and not the pool.
func (p *Pusher) request(ctx context.Context, wk *worker, prov Provider, t Target, n Notification) Result {
	if wk != nil && !wk.detached.Load() {
		fired := make(chan struct{})
		tm := time.AfterFunc(detachAfter, func() {
			defer close(fired)
			p.detach(ctx, wk)
		})
		defer func() {
			if !tm.Stop() {
				<-fired // this worker outlives the detach, which counts it in p.wg
			}
		}()
	}
	rctx, cancel := context.WithTimeout(ctx, p.o.SendTimeout)
	defer cancel()
	return prov.Send(rctx, t, n)
}

// detach starts a worker in wk's place, unless the detached requests are at their bound
// (detachedPerWorker) or the pusher is stopping. wk then ends after its user (work).
func (p *Pusher) detach(ctx context.Context, wk *worker) {
	if ctx.Err() != nil || p.detached.Add(1) > int64(detachedPerWorker*p.o.Workers) {
		p.detached.Add(-1)
		return
	}
	if !wk.detached.CompareAndSwap(false, true) {
		p.detached.Add(-1)
		return
	}
	p.wg.Go(func() { p.work(ctx, &worker{}) })
}
