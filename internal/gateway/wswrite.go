package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// The states of a connection's writer (wsConn.writer).
const (
	writerIdle    = iota // no writer goroutine: the next wake starts one
	writerRunning        // a writer goroutine runs
	writerWoken          // one runs, and must look for work again before it ends
)

// wake makes sure that a writer sees what is waiting: it starts one if none runs, or has the
// running one look again before it ends. It never blocks: the hub calls it with its lock
// held.
func (c *wsConn) wake() {
	for {
		switch c.writer.Load() {
		case writerIdle:
			if c.writer.CompareAndSwap(writerIdle, writerRunning) {
				go c.runWriter()
				return
			}
		case writerRunning:
			if c.writer.CompareAndSwap(writerRunning, writerWoken) {
				return
			}
		default:
			return
		}
	}
}

// runWriter is the writer: it writes until nothing waits, then ends, leaving the connection
// without a writer goroutine until wake starts another. Once the connection is ending it
// finishes it instead and never sets writerIdle, so that no other writer starts.
func (c *wsConn) runWriter() {
	for {
		c.writer.Store(writerRunning)
		if !c.writeAll() {
			c.finish()
			return
		}
		if c.writer.CompareAndSwap(writerRunning, writerIdle) {
			return
		}
	}
}

// writeAll writes what is waiting: the catch-up from the cursor (on the first run), a ping
// that is due, replies and events. It returns false when the connection is ending.
func (c *wsConn) writeAll() (open bool) {
	defer c.guard("writer") // after a panic, open stays false: the connection ends
	if c.cursor != nil {
		c.last, c.cursor = *c.cursor, nil
		if !c.catchUp(c.sub, &c.last) {
			return false
		}
		c.tell()
	}
	if c.changes != nil {
		frame, err := json.Marshal(c.changes)
		c.changes = nil
		if err != nil || !c.pushFrame(frame) {
			c.close(websocket.CloseInternalServerErr, "internal error", nil)
			return false
		}
	}
	var replies [][]byte
	var events []*hub.Event
	var notices []hub.Notice
	for !c.closing() {
		if c.pingDue.Swap(false) {
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.g.cfg.WriteTimeout)); err != nil {
				c.close(CloseTooSlow, "write failed", nil)
				return false
			}
		}
		// What was taken last time is handed back, emptied, to take the next in: a busy
		// connection allocates nothing here, and an idle one keeps neither slice.
		clear(replies)
		clear(events)
		clear(notices)
		replies, events = c.replies.take(replies), c.sub.Take(events)
		notices = c.sub.TakeNotices(notices)
		some := replies != nil || events != nil || notices != nil
		var err error
		if some {
			err = c.writeWaiting(replies, events, notices)
		}
		if err == nil { // after the replies: a presence_subscribe answer comes before its changes
			var wrote bool
			wrote, err = c.writePresence()
			some = some || wrote
		}
		if err != nil {
			c.close(CloseTooSlow, "write failed", nil) // usually the peer is gone; if not, it is too slow
			return false
		}
		if !some {
			return c.subscribed(c.sub)
		}
		c.tell()
	}
	return false
}

// tell lets the pusher know how far the device has been handed its events.
func (c *wsConn) tell() {
	if c.last > c.told {
		c.told = c.last
		c.g.presence.Sent(c.me.UserID, c.me.DeviceID, c.last)
	}
}

// hold makes the frames written until the next flush (writeWaiting's, or pushPage's) go out
// together, in one system call for every 64 KiB (corkConn).
func (c *wsConn) hold() {
	if c.cork != nil {
		c.cork.hold()
	}
}

// writeWaiting writes replies, then events, then notices, held together and sent at the
// end (corkConn).
func (c *wsConn) writeWaiting(replies [][]byte, events []*hub.Event, notices []hub.Notice) error {
	c.hold()
	for _, b := range replies {
		if err := c.write(b); err != nil {
			return err
		}
	}
	for _, ev := range events {
		if !c.deliver(c.sub, ev, &c.last) {
			return errConnEnding
		}
	}
	if len(notices) > 0 {
		buf := pushBuffers.Get().(*[]byte)
		defer pushBuffers.Put(buf)
		for _, n := range notices {
			*buf = appendNoticePush((*buf)[:0], n, c.pullDelay())
			if !c.pushFrame(*buf) {
				return errConnEnding
			}
		}
	}
	return c.flush()
}

// pullDelay returns a notice's pull delay in milliseconds: uniform in [0, PullDelayMax], a
// different one for every notice, so that the members of a large group pull at different
// times.
func (c *wsConn) pullDelay() int64 {
	max := c.g.cfg.PullDelayMax.Milliseconds()
	if max <= 0 {
		return 0
	}
	return rand.Int64N(max + 1)
}

// flush sends everything written since hold, and stops holding.
func (c *wsConn) flush() error {
	if c.cork != nil {
		return c.cork.flush()
	}
	return nil
}

// errConnEnding reports that the connection is closing (deliver has closed it).
var errConnEnding = errors.New("gateway: connection ending")

func (c *wsConn) write(b []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.g.cfg.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// closeGrace bounds the close handshake: the wait for the client's close frame.
const closeGrace = time.Second

// finish writes the last frame and the close frame, then leaves the reader to read the
// client's close answer and close the socket, which grace does instead if the answer takes
// longer than closeGrace. (The reader's end needs no channel of its own: an idle connection
// holds a little less.)
func (c *wsConn) finish() {
	defer c.finished.Done()
	c.timer.Stop()
	<-c.done
	_ = c.flush() // frames held when the writer stopped; an error shows below
	deadline := time.Now().Add(closeGrace)
	if c.lastFrame != nil {
		_ = c.ws.SetWriteDeadline(deadline)
		_ = c.ws.WriteMessage(websocket.TextMessage, c.lastFrame)
	}
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(c.closeCode, c.closeReason), deadline)
	c.grace = time.AfterFunc(closeGrace, func() { _ = c.ws.Close() })
}

// deliver pushes a live event unless it was already pushed; a gap before it is filled
// from the log first. A wake-up (an event without a Body, from another node) is such a gap.
func (c *wsConn) deliver(sub *hub.Subscription, ev *hub.Event, last *int64) bool {
	if ev.Body == nil { // a wake-up from another node: the log has an event at ev.Cursor
		if ev.Cursor <= *last {
			return true
		}
		return c.catchUp(sub, last)
	}
	if ev.Cursor == 0 { // ephemeral, in no log (a receipts push): its Data is the whole frame
		return c.pushFrame(ev.Data)
	}
	if ev.Cursor <= *last {
		return true
	}
	if ev.Cursor > *last+1 {
		if !c.catchUp(sub, last) {
			return false
		}
		if ev.Cursor <= *last {
			return true
		}
		// The hub delivered an event that sync does not show: chat publishes only committed
		// events, so it came from the bus and no node committed it. It is dropped, not
		// pushed, and the connection stays: closing it would let such a message end any
		// user's connection. Were it real after all, the next catch-up would push it.
		c.g.log.Warn("gateway: a live event ahead of the sync log, dropped", "user", c.me.UserID, "cursor", ev.Cursor, "last", *last)
		return true
	}
	if !c.push(ev) {
		return false
	}
	*last = ev.Cursor
	c.observe(ev.Type, ev.ConvID, ev.Data)
	return true
}

// pushBuffers recycles the buffers push frames are built in: a 500-member group message
// would otherwise leave 500 copies of its frame to the garbage collector.
var pushBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPush is the largest buffer kept in pushBuffers, so that one very large frame does
// not stay cached: a frame of a message at the 64 KiB content limit fits.
const maxPooledPush = 128 << 10

// push writes one event, after any replies already queued (see pushFrame).
func (c *wsConn) push(ev *hub.Event) bool {
	buf := pushBuffers.Get().(*[]byte)
	*buf = appendEventPush((*buf)[:0], ev)
	ok := c.pushFrame(*buf)
	if cap(*buf) <= maxPooledPush {
		pushBuffers.Put(buf)
	}
	return ok
}

// pushFrame writes the push frame of one event, after any replies already queued (so that
// a long catch-up does not hold them back until the reply queue overflows).
func (c *wsConn) pushFrame(frame []byte) bool {
	var err error
	for _, r := range c.replies.take(nil) {
		if err = c.write(r); err != nil {
			break
		}
	}
	if err == nil {
		err = c.write(frame) // gorilla has copied or sent the frame when it returns
	}
	if err != nil || c.closing() {
		c.close(CloseTooSlow, "write failed", nil)
		return false
	}
	c.g.met.EventsPushed(1)
	return true
}

// observe keeps the connection's rooms in step with the user's log, event by event as they
// are pushed (catch-up and live alike, in cursor order): a conv_updated event of a
// read-fanout conversation follows it (a join, or the switch of a group) or unfollows it
// (the user left or was removed), and a read or a clear raises what the user has seen of
// it, for the unread counts of its notices.
func (c *wsConn) observe(typ, convID string, data []byte) {
	h := c.g.svc.Hub()
	switch typ {
	case protocol.EventConvUpdated:
		if !bytes.Contains(data, readFanoutField) {
			return
		}
		var b protocol.ConversationBrief
		if json.Unmarshal(data, &b) != nil {
			return
		}
		if b.Removed {
			h.Unfollow(c.sub, convID)
		} else {
			h.Follow(c.sub, convID, b.MaxSeq-b.Unread, b.MaxSeq)
		}
	case protocol.EventRead:
		var d protocol.ReadData
		if c.sub.Follows(convID) && json.Unmarshal(data, &d) == nil && d.UserID == c.me.UserID {
			h.Seen(c.sub, convID, d.ReadSeq)
		}
	case protocol.EventConvDeleted:
		var d protocol.ConvDeletedData
		if c.sub.Follows(convID) && json.Unmarshal(data, &d) == nil {
			h.Seen(c.sub, convID, d.ClearedSeq)
		}
	}
}

// readFanoutField is how a brief of a read-fanout conversation says so, as the server
// encodes it: most conv_updated events are not, and are not decoded.
var readFanoutField = []byte(`"fanout":"read"`)
