package push

// This file is how the pusher sends to providers: one notification (a request slot at its
// origin, the origin's breaker, the deadline, and the worker's hand-over when a service is
// slow), a device's notifications in turn with what each answer means, and the test push.

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
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

// send sends ns in turn. It returns, when one must be tried again, the time to; whether
// the target was removed as dead; and whether the device is parked until its origin,
// which is down, answers again (breaker). A device whose origin has no request slot free
// (OriginShare) is woken when one frees, and comes back after SendTimeout at the latest.
func (w *pass) send(d *deviceState, prov Provider, ns []Notification, oldest int64) (retryAt time.Time, removed, parked bool) {
	p := w.p
	provider := providerLabel(d.t.Provider)
	gaveUp := oldest != math.MaxInt64 && w.now.Sub(time.UnixMilli(oldest)) >= p.o.GiveUpAfter
	for _, n := range ns {
		res, opened, sent := w.attempt(d, prov, n, gaveUp)
		if !sent {
			if res.Outcome == Retry { // no slot: woken when one frees, or at the latest then
				return w.now.Add(p.o.SendTimeout), false, false
			}
			return time.Time{}, false, true
		}
		switch res.Outcome {
		case Delivered:
			p.o.Obs.PushSent(provider, p.o.Now().Sub(time.UnixMilli(n.eventTS)))
		case Retry:
			if w.ctx.Err() != nil {
				return w.now.Add(p.o.MinBackoff), false, false
			}
			if gaveUp {
				p.o.Obs.PushGaveUp(provider)
				p.o.Log.Warn("push: gave up", "user", w.uid, "device", d.t.DeviceID, "provider", d.t.Provider, "status", res.Status, "reason", res.Reason)
				continue
			}
			p.o.Obs.PushRetried(provider)
			if opened {
				return time.Time{}, false, true // the origin is down: wait for it, not for a backoff
			}
			d.attempt++
			wait := backoff(d.attempt, p.o.MinBackoff, p.o.MaxBackoff)
			wait = max(wait, res.RetryAfter)
			p.setNotBefore(w.uid, d.t.DeviceID, d.attempt, w.now.Add(wait))
			return w.now.Add(wait), false, false
		case Unregistered:
			if !res.DeadSince.IsZero() && res.DeadSince.Before(time.UnixMilli(d.t.RegisteredAt)) {
				// Registered again after APNs saw it die: the token lives; drop this one.
				p.o.Obs.PushFailed(provider, reasonLabel(d.t.Provider, res))
				continue
			}
			w.remove(d, res)
			return time.Time{}, true, false
		default:
			p.o.Obs.PushFailed(provider, reasonLabel(d.t.Provider, res))
			p.o.Log.Warn("push: rejected", "user", w.uid, "device", d.t.DeviceID, "provider", d.t.Provider, "status", res.Status, "reason", res.Reason)
		}
	}
	if d.attempt > 0 {
		p.setNotBefore(w.uid, d.t.DeviceID, 0, time.Time{})
	}
	return time.Time{}, false, false
}

// remove deletes a dead token's target, unless the device registered another since.
func (w *pass) remove(d *deviceState, res Result) {
	p := w.p
	err := p.o.Store.Update(w.ctx, func(tx store.Tx) error {
		t, err := tx.PushTarget(w.ctx, w.uid, d.t.DeviceID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil || t.Token != d.t.Token {
			return err
		}
		return tx.DeletePushTarget(w.ctx, w.uid, d.t.DeviceID)
	})
	if err != nil {
		p.o.Log.Error("push: remove a dead token", "user", w.uid, "device", d.t.DeviceID, "err", err)
		return
	}
	if err := p.Reload(w.ctx, w.uid); err != nil {
		p.o.Log.Error("push: reload targets", "user", w.uid, "err", err)
	}
	p.o.Obs.PushTokenRemoved(providerLabel(d.t.Provider), reasonLabel(d.t.Provider, res))
	p.o.Log.Info("push: removed a dead token", "user", w.uid, "device", d.t.DeviceID, "provider", d.t.Provider, "status", res.Status, "reason", res.Reason)
}

// Test sends a test notification to each of the user's devices now, bypassing cursors,
// presence and backoff, and returns each provider's answer: `parley push test`.
func (p *Pusher) Test(ctx context.Context, userID string) ([]protocol.PushTestResult, error) {
	ts, err := p.targets(ctx, userID)
	if err != nil {
		return nil, err
	}
	badge, err := p.o.Facts.Badge(ctx, userID)
	if err != nil {
		return nil, err
	}
	var out []protocol.PushTestResult
	now := p.o.Now()
	for _, t := range ts {
		r := protocol.PushTestResult{DeviceID: t.DeviceID, Provider: t.Provider, Outcome: "unconfigured"}
		if prov := p.o.Providers[t.Provider]; prov != nil {
			n := Notification{ID: notificationID(userID, t.DeviceID, -now.UnixNano()), CollapseID: "test",
				SenderName: "Parley", Preview: "Test notification", Badge: badge, Expiration: now.Add(time.Hour)}
			res := p.request(ctx, nil, prov, Target{UserID: userID, DeviceID: t.DeviceID, Provider: t.Provider, Token: t.Token,
				Topic: t.Topic, Locale: t.Locale, RegisteredAt: time.UnixMilli(t.RegisteredAt)}, n)
			r.Outcome, r.Status, r.Reason = res.Outcome.String(), res.Status, res.Reason
		}
		out = append(out, r)
	}
	return out, nil
}
