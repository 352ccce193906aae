package push

// This file is scheduling: which users are worked on, and when. The targets are loaded
// (sweep, Reload), users queued when their log grows (Notify) or a timer fires, and the
// workers take them off the ready list.

import (
	"context"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Notify tells the pusher that userID's log has events up to cursor: the chat service
// calls it after every commit that wrote events.
func (p *Pusher) Notify(userID string, cursor int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[userID]; u != nil {
		p.enqueueLocked(u)
	}
}

// Reload re-reads userID's targets (a device registered or removed one) and works on them.
func (p *Pusher) Reload(ctx context.Context, userID string) error {
	ts, err := p.targets(ctx, userID)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loadLocked(userID, ts, true)
	return nil
}

// targets reads userID's targets from the store.
func (p *Pusher) targets(ctx context.Context, userID string) ([]store.PushTarget, error) {
	var ts []store.PushTarget
	err := p.o.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		ts, err = tx.PushTargets(ctx, userID)
		return err
	})
	return ts, err
}

// sweep reads every target, adds those it did not know and drops those removed, and works
// on every user (each finds out from its log whether anything is pending).
func (p *Pusher) sweep(ctx context.Context) error {
	seen := make(map[string]bool)
	err := eachTargetPage(ctx, p.o.Store, func(ts []store.PushTarget) {
		p.mu.Lock()
		for i := 0; i < len(ts); {
			j := i
			for j < len(ts) && ts[j].UserID == ts[i].UserID {
				j++
			}
			uid := ts[i].UserID
			if !seen[uid] {
				seen[uid] = true
				p.loadLocked(uid, ts[i:j], true)
			} else { // the user's targets straddle two pages
				p.loadLocked(uid, append(p.targetsLocked(uid), ts[i:j]...), true)
			}
			i = j
		}
		p.mu.Unlock()
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	for uid := range p.users {
		if !seen[uid] {
			p.loadLocked(uid, nil, false)
		}
	}
	p.mu.Unlock()
	return nil
}

// eachTargetPage reads every push target of st, a page of them in each View (ordered by
// user, then device), and hands each page to fn.
func eachTargetPage(ctx context.Context, st store.Store, fn func([]store.PushTarget)) error {
	const page = 500
	afterUser, afterDevice := "", ""
	for {
		var ts []store.PushTarget
		err := st.View(ctx, func(tx store.ReadTx) error {
			var err error
			ts, err = tx.PushTargetsAfter(ctx, afterUser, afterDevice, page)
			return err
		})
		if err != nil {
			return err
		}
		fn(ts)
		if len(ts) < page {
			return nil
		}
		afterUser, afterDevice = ts[len(ts)-1].UserID, ts[len(ts)-1].DeviceID
	}
}

// targetsLocked returns the targets known for uid.
func (p *Pusher) targetsLocked(uid string) []store.PushTarget {
	u := p.users[uid]
	if u == nil {
		return nil
	}
	var ts []store.PushTarget
	for _, d := range u.devices {
		ts = append(ts, d.t)
	}
	return ts
}

// loadLocked makes uid's devices those of ts, keeping what is known of devices that stay
// (a cursor advanced but not yet flushed), and queues the user when wake is set.
func (p *Pusher) loadLocked(uid string, ts []store.PushTarget, wake bool) {
	u := p.users[uid]
	if len(ts) == 0 {
		if u != nil {
			if u.timer != nil {
				u.timer.Stop()
			}
			u.devices = nil
			if !u.working && !u.queued {
				delete(p.users, uid)
			}
		}
		return
	}
	if u == nil {
		u = &userState{id: uid}
		p.users[uid] = u
	}
	old := u.devices
	u.devices = make(map[string]*deviceState, len(ts))
	for _, t := range ts {
		d := old[t.DeviceID]
		if d == nil || d.t.Token != t.Token || d.t.Provider != t.Provider {
			d = &deviceState{t: t, cursor: t.Cursor}
			d.origin, d.limited = p.originOf(t)
		} else {
			d.t = t
			d.cursor = max(d.cursor, t.Cursor)
		}
		u.devices[t.DeviceID] = d
	}
	if wake {
		p.enqueueLocked(u)
	}
}

func (p *Pusher) enqueueLocked(u *userState) {
	if u.working {
		u.again = true
		return
	}
	if u.queued || !p.running {
		return
	}
	u.queued = true
	p.ready = append(p.ready, u.id)
	select {
	case p.readyC <- struct{}{}:
	default:
	}
}

// wakeAtLocked arranges for u to be worked on at t (the earliest of the times asked).
func (p *Pusher) wakeAtLocked(u *userState, t time.Time) {
	if !u.wakeAt.IsZero() && !t.Before(u.wakeAt) {
		return
	}
	u.wakeAt = t
	d := max(t.Sub(p.o.Now()), 0)
	if u.timer == nil {
		u.timer = time.AfterFunc(d, func() {
			p.mu.Lock()
			u.wakeAt = time.Time{}
			if p.users[u.id] == u {
				p.enqueueLocked(u)
			}
			p.mu.Unlock()
		})
		return
	}
	u.timer.Reset(d)
}

// work takes users off the ready list until ctx ends, or until w, detached, has finished
// its user.
func (p *Pusher) work(ctx context.Context, w *worker) {
	for {
		if w.detached.Load() {
			p.detached.Add(-1)
			return
		}
		p.mu.Lock()
		for len(p.ready) == 0 {
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-p.readyC:
			}
			p.mu.Lock()
		}
		uid := p.ready[0]
		p.ready = p.ready[1:]
		if len(p.ready) > 0 { // pass the signal on: more users wait
			select {
			case p.readyC <- struct{}{}:
			default:
			}
		}
		u := p.users[uid]
		if u == nil {
			p.mu.Unlock()
			continue
		}
		u.queued, u.working = false, true
		devices := make([]deviceState, 0, len(u.devices))
		for _, d := range u.devices {
			devices = append(devices, *d)
		}
		p.mu.Unlock()

		more, next, err := p.process(ctx, w, uid, devices)
		if err != nil && ctx.Err() == nil {
			p.o.Log.Error("push: read the log", "user", uid, "err", err)
			next = p.o.Now().Add(p.o.MinBackoff)
		}

		p.mu.Lock()
		u.working = false
		if p.users[uid] != u {
			p.mu.Unlock()
			continue
		}
		if len(u.devices) == 0 {
			delete(p.users, uid)
		} else if more || u.again {
			u.again = false
			p.enqueueLocked(u)
		} else if !next.IsZero() {
			p.wakeAtLocked(u, next)
		}
		p.mu.Unlock()
	}
}
