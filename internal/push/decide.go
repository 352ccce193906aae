package push

// This file is the decisions: one pass over a user's log, and for each device what to push
// (which events notify, collapsed to one per conversation, or a badge-only update) and when.

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/parleychat/parley/internal/store"
)

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

// notification builds the push of message event e for device d.
func (w *pass) notification(d *deviceState, e *store.Event) Notification {
	m := e.Message
	n := Notification{
		ID: notificationID(w.uid, d.t.DeviceID, e.Cursor), CollapseID: collapseID(e.ConvID),
		ConvID: e.ConvID, Seq: m.Seq, Cursor: e.Cursor, SenderID: m.SenderID,
		SenderName: w.name(m.SenderID), Badge: w.userBadge(),
		Expiration: time.UnixMilli(e.TS).Add(w.p.o.GiveUpAfter), eventTS: e.TS, Kind: kinds[m.ContentType],
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
