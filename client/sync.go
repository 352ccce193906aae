package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/parleychat/parley/protocol"
)

// This file turns pushes into the ordered, gap-free, repeat-free stream OnEvent sees. The
// invariant: cursor is the last event delivered, and an event is delivered only when its
// cursor is cursor+1. Everything else is a repeat (dropped) or follows a gap (fetched first).

// errSyncStalled: the server did not return the events a push proved to exist (a lagging
// node, say). The session reconnects, and the server replays from our cursor.
var errSyncStalled = errors.New("parley: sync returned no events for a known gap")

// enqueue hands a push to the dispatcher without ever blocking the reader, which must keep
// routing replies. A push that does not fit is dropped and fetched again later (see dispatch).
func (c *Client) enqueue(ev SyncEvent) {
	if !c.events.put(ev) {
		c.overflow.Store(true)
	}
}

// dispatch delivers queued pushes until ctx ends, a batch (whatever the reader queued
// meanwhile) at a time. A fatal error (the token no longer works) ends the session through
// fatal.
func (c *Client) dispatch(ctx context.Context, fatal context.CancelCauseFunc) {
	var batch []SyncEvent
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.events.ready:
		}
		var mark uint64
		batch, mark = c.events.take(batch)
		// A drop (a new snapshot, a reconnect) discards the rest of the batch with the queue.
		for i := 0; i < len(batch) && ctx.Err() == nil && !c.events.dropped(mark); i++ {
			c.handleErr(ctx, c.deliver(ctx, batch[i]), fatal)
		}
		// A push dropped while the queue was full is followed by at least a full queue of
		// others, so checking once it drains is enough to never leave the tail undelivered.
		if c.events.empty() && c.overflow.Swap(false) {
			c.handleErr(ctx, c.catchUp(ctx), fatal)
		}
	}
}

func (c *Client) handleErr(ctx context.Context, err error, fatal context.CancelCauseFunc) {
	switch {
	case err == nil || ctx.Err() != nil:
	case fatalForSession(err):
		fatal(err)
	default:
		// The WebSocket is the only source of truth we have left: reconnecting replays
		// everything after our cursor, so what is queued now is redundant.
		c.log.Warn("parley: cannot fill a cursor gap; reconnecting", "err", err)
		c.drainQueue()
		c.dropConn()
	}
}

func (c *Client) deliver(ctx context.Context, ev SyncEvent) error {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	for {
		last := c.cursor.Load()
		switch {
		case ev.Cursor <= last:
			return nil // a repeat
		case ev.Cursor == last+1:
			c.emitLocked(ev)
			return nil
		}
		if err := c.fillLocked(ctx, ev.Cursor-1); err != nil {
			return err
		}
	}
}

// catchUp fetches everything after the cursor, for pushes dropped on overflow.
func (c *Client) catchUp(ctx context.Context) error {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	return c.fillLocked(ctx, math.MaxInt64)
}

// fillLocked delivers events from HTTP sync until the cursor reaches upTo, or, for
// upTo == MaxInt64, until the server has no more. A 410/409 answer takes a new snapshot and
// goes on from its cursor. Lock deliverMu must be held.
func (c *Client) fillLocked(ctx context.Context, upTo int64) error {
	reset := false
	for c.cursor.Load() < upTo {
		last := c.cursor.Load()
		limit := int(min(upTo-last, protocol.MaxSyncLimit))
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		resp, err := c.SyncWith(rctx, SyncQuery{Cursor: last, Mark: c.rooms.latestMark(), Limit: limit})
		cancel()
		if needsReset(err) && !reset {
			c.log.Info("parley: cursor refused by sync; taking a snapshot", "cursor", last, "err", err)
			if err := c.resetLocked(ctx); err != nil {
				return err
			}
			reset = true // once: a fresh snapshot's cursor refused again is a server fault
			continue
		}
		if err != nil {
			return err
		}
		c.rooms.applyMark(resp.Mark, resp.Conversations, c.opts.PullDelayMax)
		for _, ev := range resp.Events {
			switch cur := c.cursor.Load(); {
			case ev.Cursor <= cur:
			case ev.Cursor == cur+1:
				c.emitLocked(ev)
			default:
				return fmt.Errorf("parley: sync after %d skipped to cursor %d", cur, ev.Cursor)
			}
		}
		if upTo == math.MaxInt64 && !resp.HasMore {
			return nil
		}
		if c.cursor.Load() == last {
			return fmt.Errorf("%w (cursor %d, want %d)", errSyncStalled, last, upTo)
		}
	}
	return nil
}

// reset takes a snapshot and restarts the stream from its cursor.
func (c *Client) reset(ctx context.Context) error {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	return c.resetLocked(ctx)
}

// resetLocked replaces the session's position with a fresh snapshot. Queued pushes are
// discarded: after a 409 they belong to a history the server no longer has, and otherwise
// they are fetched again as a gap. Lock deliverMu must be held.
func (c *Client) resetLocked(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	snap, err := c.Snapshot(rctx, c.opts.SnapshotRecent)
	cancel()
	if err != nil {
		return fmt.Errorf("parley: snapshot: %w", err)
	}
	c.drainQueue() // overflow stays set: pushes dropped after the snapshot are still owed
	c.cursor.Store(snap.Cursor)
	c.haveCursor = true
	c.rooms.reset(snap)
	if c.opts.Inbox != nil {
		c.opts.Inbox.Reset(snap)
	}
	if c.opts.OnReset != nil {
		c.opts.OnReset(snap)
	}
	return nil
}

// emitLocked delivers the next event. Lock deliverMu must be held.
func (c *Client) emitLocked(ev SyncEvent) {
	if !c.rooms.event(ev) {
		c.cursor.Store(ev.Cursor) // a message already handed over by push or history
		return
	}
	if c.opts.Inbox != nil {
		c.opts.Inbox.Apply(ev)
	}
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(ev)
	}
	c.cursor.Store(ev.Cursor)
	if c.opts.AutoDelivered && ev.Type == protocol.EventMessage {
		var m struct {
			Seq      int64  `json:"seq"`
			SenderID string `json:"sender_id"`
		}
		if json.Unmarshal(ev.Data, &m) == nil && m.Seq > 0 &&
			(c.opts.UserID == "" || m.SenderID != c.opts.UserID) {
			c.delivered.note(ev.ConvID, m.Seq)
		}
	}
}

// drainQueue discards queued pushes, and those the dispatcher has taken but not delivered.
func (c *Client) drainQueue() {
	c.events.drop()
}
