package hub

import (
	"encoding/json"
	"time"

	"github.com/parleychat/parley/protocol"
)

// Typing in read-fanout conversations (docs/design.md, "Typing cannot storm"). A room keeps
// the set of its members who type, each until TypingExpiry after their last "started", and
// pushes the set to the subscriptions that have the conversation open (never to the
// others), one Body shared by all, at most once per TypingPushEvery and only when it
// changed: 200 members typing at once in a group with 1,000 open connections are at most
// 1,000 pushes a second, not 200,000. While anyone types, a ticker of the room runs once
// per TypingPushEvery: it sends what changed and expires the typers whose time is up, so
// that the server never leaves a stale "started" standing.

// TypingExpiry is how long a "started" holds without a refresh.
const TypingExpiry = protocol.TypingExpiresMS * time.Millisecond

// TypingPushEvery is the least time between two typing pushes of one room.
const TypingPushEvery = protocol.TypingPushEveryMS * time.Millisecond

// typer is one member typing in a room.
type typer struct {
	since time.Time // the first "started" of this spell: the earliest are named
	until time.Time // when it expires
}

// roomTyping is a room's typing state. Guarded by the room's shard lock.
type roomTyping struct {
	typers   map[string]typer
	lastUser string // the newest change not yet pushed, or pushed last
	lastOn   bool
	dirty    bool        // the set changed since the last push
	sent     time.Time   // the last push
	timer    *time.Timer // the ticker's next tick, while anyone types or a push is due
}

// SetTypingClock makes h time typing by now (the service's clock, which tests move)
// instead of time.Now. Call it once, before h is used.
func (h *Hub) SetTypingClock(now func() time.Time) { h.rooms.typingNow = now }

// Typing records that userID started (on) or stopped typing in the read-fanout
// conversation convID, and has the change pushed to the subscriptions here that have the
// conversation open, within TypingPushEvery. Nothing happens without a room of convID here
// (no subscription here follows it). It never blocks.
func (h *Hub) Typing(convID, userID string, on bool) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	if rm == nil {
		return
	}
	t, now := &rm.typing, h.rooms.typingNow()
	old, was := t.typers[userID]
	switch {
	case on:
		if t.typers == nil {
			t.typers = make(map[string]typer)
		}
		since := now
		if was {
			since = old.since
		}
		t.typers[userID] = typer{since: since, until: now.Add(TypingExpiry)}
	case was:
		delete(t.typers, userID)
	default:
		return // not typing here: nothing changed
	}
	t.lastUser, t.lastOn, t.dirty = userID, on, true
	rm.scheduleTyping(h, now)
}

// scheduleTyping makes sure rm's typing ticker runs: its next tick within TypingPushEvery,
// but never sooner than TypingPushEvery after the last push. Guarded by the shard lock.
func (rm *room) scheduleTyping(h *Hub, now time.Time) {
	if rm.typing.timer != nil {
		return
	}
	wait := TypingPushEvery
	if rm.typing.dirty {
		wait = max(0, rm.typing.sent.Add(TypingPushEvery).Sub(now))
	}
	rm.typing.timer = time.AfterFunc(wait, func() { h.typingTick(rm.id, rm) })
}

// typingTick runs one tick of rm's typing ticker: it expires the typers whose time is up,
// pushes the set to the open subscriptions if it changed, and runs again while anyone
// types.
func (h *Hub) typingTick(convID string, rm *room) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	var w wakes
	defer func() {
		sh.mu.Unlock()
		w.wakeLater()
	}()
	t := &rm.typing
	t.timer = nil
	if sh.rooms[convID] != rm {
		return // the room closed meanwhile
	}
	now := h.rooms.typingNow()
	for u, ty := range t.typers {
		if !now.Before(ty.until) {
			delete(t.typers, u)
			t.lastUser, t.lastOn, t.dirty = u, false, true
		}
	}
	if t.dirty {
		if now.Sub(t.sent) < TypingPushEvery { // a tick come early (a clock set back)
			rm.scheduleTyping(h, now)
			return
		}
		t.dirty, t.sent = false, now
		if b := t.body(convID, now); b != nil {
			evs := []Event{{Body: b}}
			for s := range rm.open {
				w.queue(s, evs)
			}
		}
	}
	if len(t.typers) > 0 {
		rm.scheduleTyping(h, now)
	}
}

// body returns the push of the typing set as of now: the earliest MaxTypersNamed typers
// by start, the count, the last change, and how long the set holds without a push.
func (t *roomTyping) body(convID string, now time.Time) *Body {
	count := len(t.typers)
	p := protocol.TypingPush{Op: protocol.OpTyping, ConvID: convID, UserID: t.lastUser,
		State: protocol.TypingStopped, Typers: earliest(t.typers, protocol.MaxTypersNamed), Count: &count}
	if t.lastOn {
		p.State = protocol.TypingStarted
	}
	for _, ty := range t.typers {
		p.ExpiresInMS = max(p.ExpiresInMS, ty.until.Sub(now).Milliseconds())
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil // cannot happen: strings and numbers
	}
	return &Body{Type: protocol.OpTyping, ConvID: convID, TS: now.UnixMilli(), Data: data}
}

// earliest returns the n users of typers who started first (ties by id), never nil.
func earliest(typers map[string]typer, n int) []string {
	out := make([]string, 0, min(n, len(typers)))
	before := func(a, b string) bool {
		ta, tb := typers[a].since, typers[b].since
		return ta.Before(tb) || (ta.Equal(tb) && a < b)
	}
	for u := range typers { // an insertion into the n kept: n is 5
		i := len(out)
		for i > 0 && before(u, out[i-1]) {
			i--
		}
		if i >= n {
			continue
		}
		if len(out) < n {
			out = append(out, "")
		}
		copy(out[i+1:], out[i:len(out)-1])
		out[i] = u
	}
	return out
}

// Typers returns the users typing in convID's room here, for tests and metrics.
func (h *Hub) Typers(convID string) int {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rm := sh.rooms[convID]; rm != nil {
		return len(rm.typing.typers)
	}
	return 0
}
