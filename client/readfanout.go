package client

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/parleychat/parley/protocol"
)

// This file makes read-fanout conversations (large groups, docs/protocol.md section 10) look
// like any other to the app. Their messages are in nobody's event log, so the session learns
// of them three ways, and turns all three into the same stream of message events (Cursor 0,
// since they have none) that write-fanout messages give OnEvent:
//
//   - a "message" push, for a conversation open on this connection (OpenConversation);
//   - a "notice" (max_seq, unread, pull_delay_ms), for one that is not: the brief is updated at
//     once, and the history is fetched pull_delay_ms later, so that 100,000 members told of
//     one message do not all ask for it in the same instant;
//   - a brief in a "changes" frame (on connect) or a sync answer: fetched after a random wait
//     in [0, Options.PullDelayMax], for the same reason.
//
// Per conversation the invariant is that of the cursor: have is the last seq handed to the
// app, and a message is handed over only when its seq is have+1. A push that skips seqs is
// held until history fills the gap; a seq at or below have is a repeat and is dropped.

// maxHeld bounds the pushes held above a gap per conversation: beyond it they are dropped, and
// fetched with the gap (history serves them as well as the push did).
const maxHeld = 1000

// historyPage is the page size of the pulls: the largest the server serves (section 6.3).
const historyPage = 200

// afterFunc runs f after d unless the returned stop is called first (time.AfterFunc; tests
// substitute a clock they advance by hand).
type afterFunc func(d time.Duration, f func()) (stop func() bool)

func realAfter(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// readConv is the session's view of one read-fanout conversation.
type readConv struct {
	brief ConversationBrief // server briefs and notices merged, with this device's own reads
	floor int64             // max(read_seq, visible_from, cleared_seq): unread = max_seq - floor
	have  int64             // the last seq handed to the app
	// started is set once have is known (from a brief, a snapshot or Options.Seqs): a push
	// that races ahead of the open's answer is held, not fetched from seq 0.
	started bool
	held    map[int64]Message // pushed messages above have+1, waiting for the gap below them

	stopPull func() bool // a scheduled pull, nil if none: notices meanwhile coalesce into it
	due      bool        // the pull should run now
	failures int         // pulls failed in a row, for the backoff
	dirty    bool        // brief changed since OnConversation last saw it
}

// pending reports whether messages the server announced are still to be handed over.
func (rc *readConv) pending() bool { return rc.have < rc.brief.MaxSeq || len(rc.held) > 0 }

// setUnread recomputes unread as the server does, from max_seq and the floor.
func (rc *readConv) setUnread() {
	rc.brief.Unread = max(0, rc.brief.MaxSeq-rc.floor)
	rc.dirty = true
}

// readConvs holds every read-fanout conversation of the session, the sync mark, and the work
// the reader hands to the puller goroutine (the reader itself never waits on the app).
type readConvs struct {
	after afterFunc
	wake  chan struct{} // capacity 1: there is work for the puller

	mu       sync.Mutex                    // guards the fields below
	convs    map[string]*readConv          // conv_id -> state
	seen     map[string]int64              // conv_id -> highest message seq delivered by events
	open     map[string]bool               // conversations the app has open
	mark     int64                         // the latest mark from the server, sent with the next sync
	saved    int64                         // the mark Client.Mark returns: no announced message after it is missing
	receipts map[string]map[int64]Receipts // receipts pushed and not yet handed over, by seq
}

func newReadConvs(opts Options, after afterFunc) *readConvs {
	r := &readConvs{
		after:    after,
		wake:     make(chan struct{}, 1),
		convs:    make(map[string]*readConv),
		seen:     make(map[string]int64),
		open:     make(map[string]bool),
		mark:     opts.Mark,
		saved:    opts.Mark,
		receipts: make(map[string]map[int64]Receipts),
	}
	for id, seq := range opts.Seqs {
		r.convs[id] = &readConv{have: seq, started: true, brief: ConversationBrief{ConvID: id, Fanout: protocol.FanoutRead, MaxSeq: seq}}
	}
	return r
}

func (r *readConvs) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// convLocked returns the state of id, creating it not yet started. Lock mu must be held.
func (r *readConvs) convLocked(id string) *readConv {
	rc := r.convs[id]
	if rc == nil {
		rc = &readConv{brief: ConversationBrief{ConvID: id, Fanout: protocol.FanoutRead}}
		r.convs[id] = rc
	}
	return rc
}

// applyBriefLocked merges a brief (state, possibly older than what is held: it is applied
// idempotently) and reports whether it is a read-fanout conversation. A brief of a
// conversation that is not (or no longer) read fanout drops its state: its messages are
// events again. A conversation this
// session has no position in starts at its read floor: its unread messages are fetched, older
// ones are History's. Lock mu must be held.
func (r *readConvs) applyBriefLocked(b ConversationBrief) (*readConv, bool) {
	if b.Removed {
		delete(r.convs, b.ConvID)
		return nil, false
	}
	if b.Fanout != protocol.FanoutRead {
		if rc := r.convs[b.ConvID]; rc != nil && rc.brief.Type != "" {
			delete(r.convs, b.ConvID)
		}
		return nil, false
	}
	rc := r.convLocked(b.ConvID)
	if !rc.started {
		start, ok := r.seen[b.ConvID]
		if !ok {
			start = max(0, b.MaxSeq-b.Unread)
		}
		rc.have, rc.started = start, true
	}
	old := rc.brief
	if b.MaxSeq >= old.MaxSeq || old.Type == "" { // the newer brief wins the fields that are not positions
		nb := b
		nb.MaxSeq = max(b.MaxSeq, old.MaxSeq)
		nb.ReadSeq = max(b.ReadSeq, old.ReadSeq)
		nb.DeliveredSeq = max(b.DeliveredSeq, old.DeliveredSeq)
		nb.ClearedSeq = max(b.ClearedSeq, old.ClearedSeq)
		if old.LastMessage != nil && (nb.LastMessage == nil || old.LastMessage.Seq > nb.LastMessage.Seq) {
			nb.LastMessage = old.LastMessage
		}
		rc.brief = nb
	} else {
		rc.brief.ReadSeq = max(b.ReadSeq, old.ReadSeq)
		rc.brief.ClearedSeq = max(b.ClearedSeq, old.ClearedSeq)
	}
	rc.floor = max(rc.floor, b.MaxSeq-b.Unread, rc.brief.ReadSeq, rc.brief.ClearedSeq)
	rc.setUnread()
	return rc, true
}

// schedulePullLocked arranges a pull of id after d, unless one is already scheduled or due:
// then the notice is coalesced into it. Lock mu must be held.
func (r *readConvs) schedulePullLocked(id string, rc *readConv, d time.Duration) {
	if rc.stopPull != nil || rc.due || !rc.started || !rc.pending() {
		return
	}
	if d <= 0 {
		rc.due = true
		r.signal()
		return
	}
	stop := r.after(d, func() {
		r.mu.Lock()
		if cur := r.convs[id]; cur == rc && rc.stopPull != nil {
			rc.stopPull, rc.due = nil, true
		}
		r.mu.Unlock()
		r.signal()
	})
	rc.stopPull = stop
}

// pullNowLocked makes id's pull run now, replacing a scheduled one. Lock mu must be held.
func (r *readConvs) pullNowLocked(rc *readConv) {
	if rc.stopPull != nil {
		rc.stopPull()
		rc.stopPull = nil
	}
	if rc.started && rc.pending() {
		rc.due = true
		r.signal()
	}
}

// jitter is a random wait in [0, bound], for pulls the server gave no delay for.
func jitter(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	return rand.N(bound + 1)
}

// applyMark takes a mark and the briefs that came with it (a changes frame, a sync answer).
// A mark never moves back: a late answer to an older sync must not make the next one repeat.
func (r *readConvs) applyMark(mark int64, briefs []ConversationBrief, delayMax time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mark = max(r.mark, mark)
	for _, b := range briefs {
		if rc, ok := r.applyBriefLocked(b); ok {
			if r.open[b.ConvID] {
				r.pullNowLocked(rc)
			} else {
				r.schedulePullLocked(b.ConvID, rc, jitter(delayMax))
			}
		}
	}
	r.saveMarkLocked()
	r.signal()
}

// saveMarkLocked lets Mark advance to the latest mark once nothing announced is missing, so
// that a mark persisted by the app never runs ahead of the messages it handed over (the
// same rule as the cursor). Lock mu must be held.
func (r *readConvs) saveMarkLocked() {
	for _, rc := range r.convs {
		if rc.pending() {
			return
		}
	}
	r.saved = r.mark
}

// notice applies a notice: the brief's counters at once, the pull after its delay.
func (r *readConvs) notice(n protocol.NoticePush) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.convs[n.ConvID]
	if rc == nil {
		// No brief yet (its conv_updated may still be queued behind earlier events): where
		// this device's messages end is unknown, so the brief, when it comes, starts the pull.
		return
	}
	if n.MaxSeq >= rc.brief.MaxSeq {
		rc.brief.MaxSeq = n.MaxSeq
		rc.floor = max(rc.floor, n.MaxSeq-n.Unread)
	}
	rc.setUnread()
	if r.open[n.ConvID] {
		r.pullNowLocked(rc)
	} else {
		r.schedulePullLocked(n.ConvID, rc, time.Duration(n.PullDelayMS)*time.Millisecond)
	}
	r.signal()
}

// push takes a message pushed for an open conversation. The next seq is handed over at once
// (by the puller); one past a gap is held while history fills the gap; a repeat is dropped.
func (r *readConvs) push(m Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdLocked(m)
}

// holdLocked keeps m, a message above what the app has, until the messages below it are
// handed over, and pulls what is missing. r.mu must be held.
func (r *readConvs) holdLocked(m Message) {
	rc := r.convLocked(m.ConvID)
	if rc.started && m.Seq <= rc.have {
		return
	}
	if rc.held == nil {
		rc.held = make(map[int64]Message)
	}
	if len(rc.held) < maxHeld {
		rc.held[m.Seq] = m
	}
	if m.Seq > rc.brief.MaxSeq {
		rc.brief.MaxSeq = m.Seq
		rc.setUnread()
	}
	if last := rc.brief.LastMessage; last == nil || m.Seq > last.Seq {
		newest := m
		rc.brief.LastMessage = &newest
	}
	r.pullNowLocked(rc)
}

// ownRead moves this user's read position in id (a read event, a MarkRead answer, a sent
// message) and recomputes unread from it.
func (r *readConvs) ownRead(id string, seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.convs[id]
	if rc == nil {
		return
	}
	rc.brief.MaxSeq = max(rc.brief.MaxSeq, seq)
	rc.brief.ReadSeq = max(rc.brief.ReadSeq, min(seq, rc.brief.MaxSeq))
	rc.brief.DeliveredSeq = max(rc.brief.DeliveredSeq, rc.brief.ReadSeq)
	if rc.brief.ReadSeq > rc.floor {
		rc.floor = rc.brief.ReadSeq
		rc.setUnread()
		r.signal()
	}
}

// sent notes a message this session sent: its read position moves, and, unless the
// conversation is open (the push brings it), the message is fetched after a short random
// wait so that OnEvent sees it as other devices do; a burst of sends shares one pull.
func (r *readConvs) sent(id string, seq int64, delayMax time.Duration) {
	r.ownRead(id, seq)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc := r.convs[id]; rc != nil && !r.open[id] {
		r.schedulePullLocked(id, rc, jitter(delayMax))
	}
}

// event keeps the read-fanout state in step with the event log, and reports whether the app
// should see ev: a message event is withheld if it repeats a seq the session already handed
// over by push or history (the log and a pull can overlap while a conversation switches to
// read fanout). A conversation that switches starts after the last message its events
// delivered. Lock deliverMu is held.
func (r *readConvs) event(ev SyncEvent) (deliver bool) {
	switch ev.Type {
	case protocol.EventMessage:
		var m struct {
			Seq int64 `json:"seq"`
		}
		if json.Unmarshal(ev.Data, &m) == nil {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.seen[ev.ConvID] = max(r.seen[ev.ConvID], m.Seq)
			if rc := r.convs[ev.ConvID]; rc != nil {
				if m.Seq <= rc.have {
					return false
				}
				if rc.started && m.Seq > rc.have+1 {
					// A mention's event (section 10) past a gap: the messages below it may
					// still be on their way in the room's pushes. Held as such a push is,
					// it is handed over after them.
					if msg, err := ev.Message(); err == nil {
						r.holdLocked(msg)
						return false
					}
				}
				rc.have = m.Seq
			}
		}
	case protocol.EventConvUpdated:
		if b, err := ev.ConvUpdated(); err == nil {
			r.mu.Lock()
			if rc, ok := r.applyBriefLocked(b); ok {
				r.schedulePullLocked(b.ConvID, rc, 0)
			}
			r.mu.Unlock()
			r.signal()
		}
	case protocol.EventRead:
		// In a group, read events go only to the reader's own devices (section 7.1).
		if d, err := ev.Read(); err == nil {
			r.ownRead(ev.ConvID, d.ReadSeq)
		}
	case protocol.EventConvDeleted:
		if d, err := ev.ConvDeleted(); err == nil {
			r.mu.Lock()
			if rc := r.convs[ev.ConvID]; rc != nil && d.ClearedSeq > rc.floor {
				rc.brief.ClearedSeq = max(rc.brief.ClearedSeq, d.ClearedSeq)
				rc.floor = d.ClearedSeq
				rc.have = max(rc.have, d.ClearedSeq)
				rc.setUnread()
			}
			r.mu.Unlock()
			r.signal()
		}
	}
	return true
}

// reset replaces everything with a snapshot: its read-fanout conversations start at their
// max_seq (their recent messages are in the snapshot), like the cursor does.
func (r *readConvs) reset(snap SyncSnapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rc := range r.convs {
		if rc.stopPull != nil {
			rc.stopPull()
		}
	}
	r.convs = make(map[string]*readConv)
	r.seen = make(map[string]int64)
	for _, b := range snap.Conversations {
		r.seen[b.ConvID] = b.MaxSeq
		if rc, ok := r.applyBriefLocked(b); ok {
			rc.have = max(rc.have, b.MaxSeq)
		}
	}
	r.mark, r.saved = snap.Mark, snap.Mark
	r.signal()
}

// takeReceipts returns and clears the receipts pushes not yet handed to the app.
func (r *readConvs) takeReceipts() map[string][]Receipts {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.receipts) == 0 {
		return nil
	}
	out := make(map[string][]Receipts, len(r.receipts))
	for id, bySeq := range r.receipts {
		for _, seq := range slices.Sorted(maps.Keys(bySeq)) {
			out[id] = append(out[id], bySeq[seq])
		}
	}
	clear(r.receipts)
	return out
}

// takeBriefs returns the briefs changed since the last call, and the conversations whose
// pull is due.
func (r *readConvs) takeWork() (briefs []ConversationBrief, due []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(r.convs)) {
		rc := r.convs[id]
		if rc.dirty && rc.brief.Type != "" { // a brief known only from a notice waits for its first brief
			rc.dirty = false
			briefs = append(briefs, rc.brief)
		}
		if rc.due {
			due = append(due, id)
		}
	}
	return briefs, due
}

// nextLocked hands over the held messages that follow have, and says what remains to fetch:
// the seqs after have up to upTo. ok is false when nothing is missing. Lock mu must be held.
func (r *readConvs) nextLocked(rc *readConv) (ready []Message, after, upTo int64, ok bool) {
	for {
		m, found := rc.held[rc.have+1]
		if !found {
			break
		}
		delete(rc.held, rc.have+1)
		rc.have = m.Seq
		ready = append(ready, m)
	}
	for seq := range rc.held {
		if seq <= rc.have {
			delete(rc.held, seq)
		}
	}
	upTo = rc.brief.MaxSeq
	if len(rc.held) > 0 {
		upTo = slices.Min(slices.Collect(maps.Keys(rc.held))) - 1
	}
	return ready, rc.have, upTo, rc.have < upTo
}

// runReadFanout is the puller: it hands briefs and receipts to the app and fetches what the
// notices and briefs announced, until ctx ends. It is the only goroutine that fetches history
// for the session, so pulls of one conversation never overlap.
func (c *Client) runReadFanout(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.rooms.wake:
		}
		briefs, due := c.rooms.takeWork()
		receipts := c.rooms.takeReceipts()
		if len(briefs) > 0 || len(receipts) > 0 {
			c.deliverMu.Lock()
			for _, b := range briefs {
				if c.opts.Inbox != nil {
					c.opts.Inbox.ApplyBrief(b)
				}
				if c.opts.OnConversation != nil {
					c.opts.OnConversation(b)
				}
			}
			for _, id := range slices.Sorted(maps.Keys(receipts)) {
				if c.opts.OnReceipts != nil {
					c.opts.OnReceipts(id, receipts[id])
				}
			}
			c.deliverMu.Unlock()
		}
		for _, id := range due {
			if ctx.Err() != nil {
				return
			}
			c.pull(ctx, id)
		}
	}
}

// pull hands over id's held messages and fetches the missing ones by history, page by page,
// until the conversation's max_seq. A 429 waits for its Retry-After; another failure tries
// again later with backoff (the next notice or push would too).
func (c *Client) pull(ctx context.Context, id string) {
	r := c.rooms
	for ctx.Err() == nil {
		c.deliverMu.Lock()
		r.mu.Lock()
		rc := r.convs[id]
		if rc == nil {
			r.mu.Unlock()
			c.deliverMu.Unlock()
			return
		}
		rc.due = false
		ready, after, upTo, missing := r.nextLocked(rc)
		if !missing {
			rc.failures = 0
			r.saveMarkLocked()
		}
		r.mu.Unlock()
		for _, m := range ready {
			c.emitReadLocked(m)
		}
		c.deliverMu.Unlock()
		if !missing {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		page, err := c.History(rctx, id, HistoryQuery{AfterSeq: after, Limit: int(min(upTo-after, historyPage))})
		cancel()
		if err != nil {
			c.pullFailed(ctx, id, rc, err)
			return
		}
		if !c.deliverPage(id, rc, page.Messages) {
			return // nothing newer is visible yet: the next notice or push tries again
		}
	}
}

// deliverPage hands over a history page's messages above have, in seq order, and reports
// whether have moved. Mark advances before the app sees them if they were the last missing,
// so an app that persists Mark after its OnEvent never saves one ahead of its messages.
func (c *Client) deliverPage(id string, rc *readConv, msgs []Message) bool {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	r := c.rooms
	r.mu.Lock()
	fresh := msgs[:0:0]
	if r.convs[id] == rc {
		for _, m := range msgs {
			if m.Seq > rc.have {
				rc.have = m.Seq
				delete(rc.held, m.Seq)
				fresh = append(fresh, m)
			}
		}
		r.saveMarkLocked()
	}
	r.mu.Unlock()
	for _, m := range fresh {
		c.emitReadLocked(m)
	}
	return len(fresh) > 0
}

// pullFailed schedules the next attempt of a failed pull: after the server's Retry-After on
// a 429, after the session's backoff otherwise.
func (c *Client) pullFailed(ctx context.Context, id string, rc *readConv, err error) {
	if ctx.Err() != nil {
		return
	}
	r := c.rooms
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.convs[id] != rc {
		return
	}
	wait := c.opts.Backoff.Delay(rc.failures)
	rc.failures++
	if e, ok := err.(*Error); ok && e.Code == http.StatusTooManyRequests && e.RetryAfter > 0 {
		wait = e.RetryAfter
	}
	if ErrorCode(err) == http.StatusNotFound {
		delete(r.convs, id) // no longer a member: nothing to fetch
		return
	}
	c.log.Debug("parley: history pull failed", "conv_id", id, "err", err, "retry_in", wait)
	r.schedulePullLocked(id, rc, max(wait, time.Millisecond))
}

// emitReadLocked hands one read-fanout message to the app as a message event without a
// cursor. Lock deliverMu must be held.
func (c *Client) emitReadLocked(m Message) {
	data, err := json.Marshal(m)
	if err != nil {
		return
	}
	ev := SyncEvent{Type: protocol.EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Data: data}
	if c.opts.Inbox != nil {
		c.opts.Inbox.Apply(ev)
	}
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(ev)
	}
	if m.SenderID != "" && m.SenderID == c.opts.UserID {
		c.rooms.ownRead(m.ConvID, m.Seq) // sending moved the sender's read position
	} else if c.opts.AutoDelivered {
		c.delivered.note(m.ConvID, m.Seq)
	}
}

// OpenConversation asks the server to push every new message of convID to this session in
// full (section 9.3, op "open"), as an app does for the conversation on screen; it returns
// the caller's brief. The session remembers it and opens it again after every reconnect,
// until CloseConversation. For a write-fanout conversation this changes nothing (its messages
// are events anyway), so an app may open whatever it displays. Without a connection it only
// records the wish and returns ErrNotConnected. 409: 32 conversations are open already.
func (c *Client) OpenConversation(ctx context.Context, convID string) (ConversationBrief, error) {
	cn := c.conn.Load()
	if cn == nil {
		c.rooms.mu.Lock()
		c.rooms.open[convID] = true
		c.rooms.mu.Unlock()
		return ConversationBrief{}, ErrNotConnected
	}
	var b ConversationBrief
	if err := cn.request(ctx, protocol.OpOpen, protocol.ConvRequest{ConvID: convID}, &b); err != nil {
		return b, err
	}
	c.rooms.mu.Lock()
	c.rooms.open[convID] = true
	c.rooms.mu.Unlock()
	c.openedBrief(b)
	return b, nil
}

// openedBrief applies the brief an open answered: its messages since have are fetched now,
// since pushes only bring those sent after the open.
func (c *Client) openedBrief(b ConversationBrief) {
	r := c.rooms
	r.mu.Lock()
	if rc, ok := r.applyBriefLocked(b); ok {
		r.pullNowLocked(rc)
	}
	r.mu.Unlock()
	r.signal()
}

// CloseConversation undoes OpenConversation: the server goes back to notices for convID.
func (c *Client) CloseConversation(ctx context.Context, convID string) error {
	c.rooms.mu.Lock()
	delete(c.rooms.open, convID)
	c.rooms.mu.Unlock()
	cn := c.conn.Load()
	if cn == nil {
		return nil
	}
	return cn.request(ctx, protocol.OpClose, protocol.ConvRequest{ConvID: convID}, nil)
}

// reopen opens again, on a new connection, the conversations the app has open.
func (c *Client) reopen(ctx context.Context, cn *wsConn) {
	c.rooms.mu.Lock()
	ids := slices.Sorted(maps.Keys(c.rooms.open))
	c.rooms.mu.Unlock()
	for _, id := range ids {
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		var b ConversationBrief
		err := cn.request(rctx, protocol.OpOpen, protocol.ConvRequest{ConvID: id}, &b)
		cancel()
		switch {
		case err == nil:
			c.openedBrief(b)
		case ErrorCode(err) == http.StatusNotFound:
			c.rooms.mu.Lock()
			delete(c.rooms.open, id)
			c.rooms.mu.Unlock()
		case ErrorCode(err) == 0:
			return // the connection ended: the next one reopens
		default:
			c.log.Info("parley: reopening a conversation failed", "conv_id", id, "err", err)
		}
	}
}

// Mark returns the sync mark to persist beside Cursor (and pass back as Options.Mark): the
// position among read-fanout changes up to which every announced message was handed over.
func (c *Client) Mark() int64 {
	c.rooms.mu.Lock()
	defer c.rooms.mu.Unlock()
	return c.rooms.saved
}

// Seqs returns, per read-fanout conversation, the last seq handed to OnEvent. Persist it with
// Cursor and Mark and pass it back as Options.Seqs, so that a restarted session fetches
// exactly what follows; without it a conversation resumes at its read position.
func (c *Client) Seqs() map[string]int64 {
	c.rooms.mu.Lock()
	defer c.rooms.mu.Unlock()
	out := make(map[string]int64, len(c.rooms.convs))
	for id, rc := range c.rooms.convs {
		out[id] = rc.have
	}
	return out
}

// ReadFanoutConversation returns the session's current state of a read-fanout conversation:
// the latest brief, with max_seq, unread and members_count kept up to date by notices,
// pushes and this user's own reads. ok is false for a conversation the session has not seen
// in read fanout.
func (c *Client) ReadFanoutConversation(convID string) (b ConversationBrief, ok bool) {
	c.rooms.mu.Lock()
	defer c.rooms.mu.Unlock()
	rc := c.rooms.convs[convID]
	if rc == nil {
		return b, false
	}
	return rc.brief, true
}

// latestMark is the mark to send with the next sync.
func (r *readConvs) latestMark() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mark
}

// readFanoutPush routes one of read fanout's pushes. It runs on the reader, so it only
// updates state and wakes the puller: it never waits for the app or the network.
func (c *Client) readFanoutPush(op string, f *inFrame, data []byte) {
	switch op {
	case protocol.OpMessage:
		if f.Message != nil && f.Message.ConvID != "" && f.Message.Seq > 0 {
			c.rooms.push(*f.Message)
		}
	case protocol.OpNotice:
		var n protocol.NoticePush
		if json.Unmarshal(data, &n) == nil && n.ConvID != "" {
			c.rooms.notice(n)
		}
	case protocol.OpChanges:
		c.rooms.applyMark(f.Mark, f.Conversations, c.opts.PullDelayMax)
	case protocol.OpReceipts:
		if f.ConvID != "" {
			c.rooms.mu.Lock()
			bySeq := c.rooms.receipts[f.ConvID]
			if bySeq == nil {
				bySeq = make(map[int64]Receipts)
				c.rooms.receipts[f.ConvID] = bySeq
			}
			for _, rc := range f.Receipts { // coalesced: a message's newest counts win
				bySeq[rc.Seq] = rc
			}
			c.rooms.mu.Unlock()
			c.rooms.signal()
		}
	case protocol.OpTyping:
		var p TypingPush
		if c.opts.OnTyping != nil && json.Unmarshal(data, &p) == nil && p.ConvID != "" {
			c.opts.OnTyping(p)
		}
	case protocol.OpPresence:
		c.presenceFrame(f.Presence)
	default:
		c.log.Debug("parley: unexpected push", "op", op)
	}
}
