package gateway

import (
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// catchUp pushes every event after *last from the durable log, page by page. Live events
// that arrive meanwhile are drained from the subscription (the log has them), so a long
// catch-up on a busy account does not overflow the hub buffer and disconnect the client;
// it ends once a page reaches the log's end, which is past every live event drained before
// it was read.
func (c *wsConn) catchUp(sub *hub.Subscription, last *int64) bool {
	buf := pushBuffers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledPush {
			pushBuffers.Put(buf)
		}
	}()
	for !c.closing() {
		if !c.drain(sub) {
			return false
		}
		resp, err := c.g.svc.Events(c.ctx, c.me, *last, protocol.MaxSyncLimit)
		if err != nil {
			c.fail(err)
			return false
		}
		if !c.pushPage(sub, resp.Events, last, buf) {
			return false
		}
		if !resp.HasMore || len(resp.Events) == 0 {
			// The log has no more. A live event drained above it was never committed: chat
			// publishes events after their commit, so this read would have it. It came from
			// the bus (or is a wake-up ahead of any cursor, after a reconnection), and waiting
			// for the log to reach it would spin here for good.
			return c.writeHeld()
		}
	}
	return false
}

// writeHeld writes the ephemeral pushes drain kept during a catch-up.
func (c *wsConn) writeHeld() bool {
	held := c.held
	c.held = nil
	for _, ev := range held {
		if !c.pushFrame(ev.Data) {
			return false
		}
	}
	return true
}

// pushPage pushes the events of a catch-up page after *last, each frame built in buf, all of
// them held back and sent together (corkConn). It flushes before it returns, so that the
// client has the page while the next one is read from the store; a hold of the writer's
// (deliver filling a gap from writeWaiting) ends there too.
func (c *wsConn) pushPage(sub *hub.Subscription, evs []protocol.SyncEvent, last *int64, buf *[]byte) bool {
	c.hold()
	for i := range evs {
		if evs[i].Cursor <= *last {
			continue
		}
		*buf = appendSyncEventPush((*buf)[:0], &evs[i])
		if !c.subscribed(sub) || !c.authorized() || !c.pushFrame(*buf) {
			_ = c.flush()
			return false
		}
		*last = evs[i].Cursor
		c.observe(evs[i].Type, evs[i].ConvID, evs[i].Data)
	}
	if err := c.flush(); err != nil {
		c.close(CloseTooSlow, "write failed", nil)
		return false
	}
	return true
}

// subscribed reports whether the hub still serves sub; when it ended it (a revoke, an
// overflow, shutdown) the connection closes. A long catch-up checks it between pushes, so
// that a revoke takes effect at once rather than after the catch-up; it checks the token
// too (authorized), so that a token that expired meanwhile by the service's clock does,
// whether or not the client sends a frame or the connection's timer has come round.
func (c *wsConn) subscribed(sub *hub.Subscription) bool {
	if err := sub.Err(); err != nil {
		c.subscriptionEnded(err)
		return false
	}
	return true
}

// drain takes every event already buffered in sub. The log has those events; the
// ephemeral ones it has not, so they are kept in c.held, for writeHeld. They are held up to SendQueue, as many as the client may
// have pending anyway: past that (a catch-up that lasts while a busy group's room pushes,
// or a flood of receipts pushes, keep coming) the client is as far behind as one whose
// queue overflowed, and is closed the same way (ok false), to reconnect with its cursor
// and read what it missed from the log and history. Without the bound, held would grow
// for as long as the catch-up lasts.
func (c *wsConn) drain(sub *hub.Subscription) (ok bool) {
	for _, ev := range sub.Take(nil) {
		if ev.Cursor != 0 {
			continue
		}
		if len(c.held) >= c.g.cfg.SendQueue {
			c.held = nil
			c.close(CloseTooSlow, "too slow: reconnect with your cursor", nil)
			return false
		}
		c.held = append(c.held, ev)
	}
	return true
}
