package push

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Facts is what the pusher needs from the chat rules: the badge and display names.
type Facts interface {
	// Badge returns the user's unread total, muted conversations left out.
	Badge(ctx context.Context, userID string) (int, error)
	// BadgeIn is Badge read in tx, the muted conversations given.
	BadgeIn(ctx context.Context, tx store.ReadTx, userID string, muted map[string]bool) (int, error)
	// Name returns the user's display name.
	Name(ctx context.Context, userID string) (string, error)
}

// Observer receives the pusher's measurements; the metrics package implements it. Every
// provider and reason it is given is from a fixed set (labels.go), never a service's text.
type Observer interface {
	PushSent(provider string, lag time.Duration) // accepted by the provider; lag from the event's commit
	PushFailed(provider, reason string)          // rejected for good (the notification is dropped)
	PushRetried(provider string)                 // a transient failure, to be tried again
	PushGaveUp(provider string)                  // still failing 24 h after the event: dropped
	PushCollapsed(n int)                         // notifications not sent because a later one of their conversation was
	PushTokenRemoved(provider, reason string)    // a dead token's target removed
}

type nopObserver struct{}

func (nopObserver) PushSent(string, time.Duration)  {}
func (nopObserver) PushFailed(string, string)       {}
func (nopObserver) PushRetried(string)              {}
func (nopObserver) PushGaveUp(string)               {}
func (nopObserver) PushCollapsed(int)               {}
func (nopObserver) PushTokenRemoved(string, string) {}

// Options configure a Pusher. Store, Facts and Providers are required.
type Options struct {
	Store     store.Store
	Facts     Facts
	Providers map[string]Provider // by provider name; targets of a provider not here are skipped
	Presence  *Presence           // nil: every device counts as offline
	// Grace is how long a live device (Presence) has to take an event before it is pushed
	// anyway. Default 3 s.
	Grace time.Duration
	// Settle is how long after an event an offline device waits before it is pushed: on
	// several nodes, the time it takes another node's news that the device connected there
	// (Feed) to arrive. 0 on one node, where presence is known at once.
	Settle time.Duration
	// CollapseWindow is the least time between two pushes to one device: the messages that
	// arrive meanwhile go out together, one notification per conversation. Default 1 s.
	CollapseWindow time.Duration
	// GiveUpAfter is how long after an event the pusher stops retrying its push. Default 24 h.
	GiveUpAfter time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between retries (with jitter,
	// and never shorter than the provider's Retry-After). Defaults 1 s and 1 h.
	MinBackoff, MaxBackoff time.Duration
	// Workers is how many users are worked on at once, each with its sends in turn. Default
	// 128. A worker whose request is unanswered after half a second hands its place to a new
	// one (up to 8 times Workers such requests at once), so slow services do not hold them.
	Workers int
	// SendTimeout bounds each provider request whole, its answer's body included. Default
	// DefaultSendTimeout (10 s).
	SendTimeout time.Duration
	// OriginShare is the most requests one push service a client chose (a Web Push origin)
	// may have under way at once; more wait for a slot. Default Workers/8 (at least 1).
	OriginShare int
	// Preview puts up to this many characters of a text message in its notification; 0
	// (the default) sends no content.
	Preview int
	// FlushEvery is how often advanced cursors are written to the store. Default 100 ms: a
	// crash repeats at most that much, and a repeat carries the same notification id.
	FlushEvery time.Duration
	// SweepEvery is how often every target is compared with its user's log, to find events
	// no wake-up announced (committed by another node). Default 30 s.
	SweepEvery time.Duration
	// VAPIDPublicKey is the Web Push application server key that clients subscribe with.
	VAPIDPublicKey string
	Now            func() time.Time
	Log            *slog.Logger
	Obs            Observer
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Grace, 3*time.Second)
	def(&o.CollapseWindow, time.Second)
	def(&o.GiveUpAfter, 24*time.Hour)
	def(&o.MinBackoff, time.Second)
	def(&o.MaxBackoff, time.Hour)
	def(&o.FlushEvery, 100*time.Millisecond)
	def(&o.SweepEvery, 30*time.Second)
	def(&o.SendTimeout, DefaultSendTimeout)
	if o.Workers <= 0 {
		o.Workers = 128
	}
	if o.OriginShare <= 0 {
		o.OriginShare = max(o.Workers/8, 1)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Obs == nil {
		o.Obs = nopObserver{}
	}
	if o.Presence == nil {
		o.Presence = NewPresence(o.Now)
	}
}

// Pusher pushes each registered device the events of its user's log that it did not take
// live, advancing the device's durable cursor behind the provider's acceptance. The zero
// value is not usable; call New, then Run.
type Pusher struct {
	o Options

	mu      sync.Mutex
	users   map[string]*userState
	ready   []string      // users to work on, in order
	readyC  chan struct{} // signalled when ready grows
	dirty   map[deviceKey]int64
	running bool
	leading atomic.Bool // run is working: this node pushes (Leading)

	origins  *originTable   // by origin: breakers and request slots
	wg       sync.WaitGroup // the workers of run, detached ones included
	detached atomic.Int64   // requests waited on apart from the workers (detachAfter)

	names nameCache // senders' display names
}

// userState is the pusher's memory of one user with targets.
type userState struct {
	id      string
	devices map[string]*deviceState
	queued  bool // in ready
	working bool // a worker has it
	again   bool // woken while a worker had it
	timer   *time.Timer
	wakeAt  time.Time // timer's time, zero when none
}

// deviceState is one target and where its pushes are.
type deviceState struct {
	t         store.PushTarget
	origin    string // where its requests go: an Origins provider's origin, else the provider's name
	limited   bool   // origin is one a client chose: at most OriginShare requests at once
	cursor    int64  // every event at or below it is dealt with (t.Cursor is the stored one)
	attempt   int    // failed attempts of the current notifications
	notBefore time.Time
	lastPush  time.Time
}

// New returns a pusher; Run starts it.
func New(o Options) *Pusher {
	o.defaults()
	return &Pusher{o: o, users: make(map[string]*userState), readyC: make(chan struct{}, 1), dirty: make(map[deviceKey]int64),
		origins: newOriginTable(o.OriginShare)}
}

// originOf returns where t's requests go, and whether a client chose it (Origins).
func (p *Pusher) originOf(t store.PushTarget) (string, bool) {
	if r, ok := p.o.Providers[t.Provider].(Origins); ok {
		if o := r.Origin(Target{Provider: t.Provider, Token: t.Token}); o != "" {
			return o, true
		}
	}
	return t.Provider, false
}

// Run loads every target, works until ctx ends, then writes the cursors it advanced. On a
// store shared by several nodes (store.Leader) it first waits to be the one pusher.
func (p *Pusher) Run(ctx context.Context) error {
	if l, ok := p.o.Store.(store.Leader); ok {
		for ctx.Err() == nil {
			lost, release, err := l.Lead(ctx, "push")
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.o.Log.Error("push: lead", "err", err)
				if !sleep(ctx, p.o.MinBackoff) {
					return nil
				}
				continue
			}
			p.o.Log.Info("push: this node pushes")
			lctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-lost:
					p.o.Log.Warn("push: lost the lead")
				case <-lctx.Done():
				}
				cancel()
			}()
			err = p.run(lctx)
			cancel()
			release()
			if err != nil && ctx.Err() == nil {
				p.o.Log.Error("push: stopped", "err", err)
			}
		}
		return nil
	}
	return p.run(ctx)
}

func (p *Pusher) run(ctx context.Context) error {
	p.mu.Lock()
	p.users = make(map[string]*userState)
	p.ready = nil
	p.running = true
	p.mu.Unlock()
	p.leading.Store(true)
	defer p.leading.Store(false)
	defer func() {
		p.mu.Lock()
		p.running = false
		for _, u := range p.users {
			if u.timer != nil {
				u.timer.Stop()
			}
		}
		p.mu.Unlock()
		p.origins.stop()
	}()
	for { // the targets first: a store that is not there yet is waited for, not given up on
		err := p.sweep(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		p.o.Log.Error("push: read the registrations (trying again)", "err", err)
		if !sleep(ctx, p.o.MinBackoff) {
			return nil
		}
	}
	for range p.o.Workers {
		p.wg.Go(func() { p.work(ctx, &worker{}) })
	}
	flush := time.NewTicker(p.o.FlushEvery)
	sweep := time.NewTicker(p.o.SweepEvery)
	defer flush.Stop()
	defer sweep.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-flush.C:
			p.flush(ctx)
		case <-sweep.C:
			p.o.Presence.forget(max(10*p.o.Grace, time.Minute))
			p.origins.prune(p.o.Now(), 2*breakerMax)
			if err := p.sweep(ctx); err != nil && ctx.Err() == nil {
				p.o.Log.Error("push: sweep", "err", err)
			}
		}
	}
	p.wg.Wait()
	p.flush(context.WithoutCancel(ctx))
	return nil
}

// Leading reports whether this pusher is the one that pushes (on a store several nodes
// share, the holder of the lead; on one node, while it runs).
func (p *Pusher) Leading() bool { return p.leading.Load() }

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
	var ts []store.PushTarget
	err := p.o.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		ts, err = tx.PushTargets(ctx, userID)
		return err
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loadLocked(userID, ts, true)
	return nil
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

// batch is how many events of a user's log one pass reads: a device offline for days
// takes several passes, each as cheap as the common one-event pass (stores allocate room
// for the whole limit).
const batch = 64

// process works on one user's devices: reads the log from the least cursor, decides and
// sends each device's notifications, and records how far each got. It returns whether
// the log has more than one pass read, and when to come back for devices that must wait
// (zero: not needed).
func (p *Pusher) process(ctx context.Context, wk *worker, uid string, devices []deviceState) (more bool, next time.Time, err error) {
	from := int64(math.MaxInt64)
	for _, d := range devices {
		from = min(from, d.cursor)
	}
	w := &pass{p: p, ctx: ctx, wk: wk, uid: uid, badge: -1, muted: make(map[string]bool)}
	err = p.o.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		if w.evs, err = tx.Events(ctx, uid, from, batch); err != nil || len(w.evs) == 0 {
			return err
		}
		mutes, err := tx.Mutes(ctx, uid)
		if err != nil {
			return err
		}
		w.now = p.o.Now()
		nowMS := w.now.UnixMilli()
		for _, m := range mutes {
			if m.Until > nowMS {
				w.muted[m.ConvID] = true
			}
		}
		if slices.ContainsFunc(w.evs, func(e store.Event) bool { return w.notifies(&e) || e.Type == "read" }) {
			// Likely to be sent: the badge from the same snapshot, in the same transaction.
			w.badge, err = p.o.Facts.BadgeIn(ctx, tx, uid, w.muted)
		}
		return err
	})
	if err != nil || len(w.evs) == 0 {
		return false, time.Time{}, err
	}
	for i := range devices {
		if t := w.device(&devices[i]); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	// Another pass only helps a device that got through this one: one that waits (a breaker,
	// a request slot, a backoff) would read the same events again, in a busy loop.
	more = len(w.evs) == batch && w.throughAll
	return more, next, nil
}

// pass is one reading of a user's log, shared by the user's devices.
type pass struct {
	p     *Pusher
	ctx   context.Context
	wk    *worker // the worker on it, for detach
	uid   string
	evs   []store.Event
	now   time.Time
	muted map[string]bool
	badge int // -1 until read
	// throughAll is set when a device dealt with every event of the pass.
	throughAll bool
}

// device decides and sends one device's notifications for the events of the pass after
// its cursor, and records the outcome. It returns when to come back (zero: when woken).
func (w *pass) device(d *deviceState) time.Time {
	p := w.p
	if d.notBefore.After(w.now) {
		return d.notBefore
	}

	prov := p.o.Providers[d.t.Provider]
	live, taken := p.o.Presence.state(w.uid, d.t.DeviceID, p.o.Grace)
	var (
		end     = d.cursor // the prefix of events dealt with ends here
		latest  = map[string]int{}
		order   []string // conversations in order of first notification
		badged  = -1     // index of the last read event, for a badge-only push
		waitFor time.Time
		oldest  int64 = math.MaxInt64
	)
	for i := range w.evs {
		e := &w.evs[i]
		if e.Cursor <= d.cursor {
			continue
		}
		if prov != nil && e.Cursor > taken {
			switch {
			case w.notifies(e):
				wait := p.o.Settle
				if live {
					wait = p.o.Grace // the device may yet take it live
				}
				if due := time.UnixMilli(e.TS).Add(wait); wait > 0 && due.After(w.now) {
					waitFor = due
					break
				}
				if _, ok := latest[e.ConvID]; !ok {
					order = append(order, e.ConvID)
				}
				latest[e.ConvID] = i
				oldest = min(oldest, e.TS)
			case e.Type == "read" && !live && d.t.Provider != WebPush:
				badged = i
			}
			if !waitFor.IsZero() {
				break
			}
		}
		end = e.Cursor
	}
	if len(order) > 0 && w.now.Sub(d.lastPush) < p.o.CollapseWindow {
		return d.lastPush.Add(p.o.CollapseWindow) // let the burst gather: one notification per conversation
	}
	var ns []Notification
	collapsed := 0
	for _, conv := range order {
		ns = append(ns, w.notification(d, &w.evs[latest[conv]]))
	}
	for i := range w.evs {
		if e := &w.evs[i]; e.Cursor > d.cursor && e.Cursor <= end && w.notifies(e) && e.Cursor > taken && latest[e.ConvID] != i {
			collapsed++
		}
	}
	if len(ns) == 0 && badged >= 0 {
		ns = append(ns, w.badgeOnly(d, &w.evs[badged]))
	}
	retryAt, removed, parked := w.send(d, prov, ns, oldest)
	if removed || parked {
		return time.Time{}
	}
	if !retryAt.IsZero() {
		return retryAt
	}
	if collapsed > 0 {
		p.o.Obs.PushCollapsed(collapsed)
	}
	if len(ns) > 0 {
		d.lastPush = w.now
	}
	p.advance(w.uid, d.t.DeviceID, end, d.lastPush)
	if end >= w.evs[len(w.evs)-1].Cursor {
		w.throughAll = true
	}
	if !waitFor.IsZero() {
		return waitFor
	}
	return time.Time{}
}

// notifies reports whether e deserves a notification: a message from someone else, not
// recalled, in a conversation the user has not muted.
func (w *pass) notifies(e *store.Event) bool {
	return e.Type == store.EventMessage && e.Message != nil && e.Message.SenderID != w.uid &&
		!e.Message.Recalled && !w.muted[e.ConvID]
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

// wake queues uid's work now, clearing its devices' backoff: their provider is back.
func (p *Pusher) wake(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.users[uid]
	if u == nil {
		return
	}
	for _, d := range u.devices {
		d.attempt, d.notBefore = 0, time.Time{}
	}
	p.enqueueLocked(u)
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

// notification builds the push of message event e for device d.
func (w *pass) notification(d *deviceState, e *store.Event) Notification {
	m := e.Message
	n := Notification{
		ID: notificationID(w.uid, d.t.DeviceID, e.Cursor), CollapseID: collapseID(e.ConvID),
		ConvID: e.ConvID, Seq: m.Seq, Cursor: e.Cursor, SenderID: m.SenderID,
		SenderName: w.name(m.SenderID), Badge: w.userBadge(),
		Expiration: time.UnixMilli(e.TS).Add(w.p.o.GiveUpAfter), eventTS: e.TS,
	}
	if w.p.o.Preview > 0 {
		n.Preview = preview(m.Content, w.p.o.Preview)
	}
	return n
}

// badgeOnly builds the silent badge update for read event e.
func (w *pass) badgeOnly(d *deviceState, e *store.Event) Notification {
	return Notification{ID: notificationID(w.uid, d.t.DeviceID, e.Cursor), CollapseID: "badge", Cursor: e.Cursor,
		Badge: w.userBadge(), BadgeOnly: true, Expiration: time.UnixMilli(e.TS).Add(w.p.o.GiveUpAfter), eventTS: e.TS}
}

func (w *pass) name(uid string) string {
	if n, ok := w.p.names.get(uid, w.now); ok {
		return n
	}
	n, err := w.p.o.Facts.Name(w.ctx, uid)
	if err != nil || n == "" {
		n = uid
	}
	w.p.names.put(uid, n, w.now)
	return n
}

func (w *pass) userBadge() int {
	if w.badge < 0 {
		b, err := w.p.o.Facts.Badge(w.ctx, w.uid)
		if err != nil {
			w.p.o.Log.Warn("push: badge", "user", w.uid, "err", err)
			b = 0
		}
		w.badge = b
	}
	return w.badge
}

// advance records that the device dealt with every event up to cursor, for the next flush.
func (p *Pusher) advance(uid, device string, cursor int64, lastPush time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.users[uid]
	if u == nil {
		return
	}
	d := u.devices[device]
	if d == nil {
		return
	}
	d.lastPush = lastPush
	if cursor > d.cursor {
		d.cursor = cursor
		k := deviceKey{uid, device}
		p.dirty[k] = max(p.dirty[k], cursor)
	}
}

func (p *Pusher) setNotBefore(uid, device string, attempt int, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[uid]; u != nil {
		if d := u.devices[device]; d != nil {
			d.attempt, d.notBefore = attempt, t
		}
	}
}

// flush writes the advanced cursors in one transaction; on failure they wait for the next.
func (p *Pusher) flush(ctx context.Context) {
	p.mu.Lock()
	if len(p.dirty) == 0 {
		p.mu.Unlock()
		return
	}
	dirty := p.dirty
	p.dirty = make(map[deviceKey]int64)
	p.mu.Unlock()
	keys := make([]deviceKey, 0, len(dirty))
	for k := range dirty {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b deviceKey) int { // one order for every flush: rows locked in it
		return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.device, b.device))
	})
	err := p.o.Store.Update(ctx, func(tx store.Tx) error {
		for _, k := range keys {
			if err := tx.AdvancePushCursor(ctx, k.user, k.device, dirty[k]); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil { // stopping: the last flush, on a live context, writes them
			p.o.Log.Error("push: write cursors", "devices", len(keys), "err", err)
		}
		p.mu.Lock()
		for k, c := range dirty {
			p.dirty[k] = max(p.dirty[k], c)
		}
		p.mu.Unlock()
	}
}

// backoff is the wait before attempt n (1, 2, …): doubling from min up to max, with full
// jitter in its upper half so that devices failing together do not retry together.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Validator is implemented by a provider that can tell a token it will never accept
// (a Web Push endpoint on a private address) at registration time.
type Validator interface {
	Validate(token string) error
}

// Check reports why a device's registration with provider could not be pushed to, or nil.
func (p *Pusher) Check(provider, token string) error {
	prov := p.o.Providers[provider]
	if prov == nil {
		return fmt.Errorf("provider %s is not configured on this server", provider)
	}
	if v, ok := prov.(Validator); ok {
		return v.Validate(token)
	}
	return nil
}

// VAPIDPublicKey returns the Web Push application server key, "" when Web Push is off.
func (p *Pusher) VAPIDPublicKey() string { return p.o.VAPIDPublicKey }

// Test sends a test notification to each of the user's devices now, bypassing cursors,
// presence and backoff, and returns each provider's answer: `parley push test`.
func (p *Pusher) Test(ctx context.Context, userID string) ([]protocol.PushTestResult, error) {
	var ts []store.PushTarget
	err := p.o.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		ts, err = tx.PushTargets(ctx, userID)
		return err
	})
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
