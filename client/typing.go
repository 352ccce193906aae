package client

import (
	"context"
	"sync"
	"time"

	"github.com/parleychat/parley/protocol"
)

// TypingPush is a typing change the server pushed (docs/protocol.md section 9.10).
type TypingPush = protocol.TypingPush

// Typing throttling: a keystroke sends "started" at most once per TypingEvery (the
// server drops more), and TypingIdle after the last keystroke the SDK sends "stopped" by
// itself.
const (
	TypingEvery = protocol.TypingEveryMS * time.Millisecond
	TypingIdle  = 5 * time.Second
)

// typists is what the SDK remembers of this device's typing, per conversation.
type typists struct {
	mu    sync.Mutex // guards convs and last
	convs map[string]*typist
	last  map[string]chan struct{} // per conversation, closed when its last frame queued is sent
}

type typist struct {
	sent time.Time   // the last "started" sent
	idle *time.Timer // sends "stopped" TypingIdle after the last keystroke
}

// SendTyping sends one typing op (state protocol.TypingStarted or TypingStopped) as it is,
// unthrottled, and reports whether the server forwarded it (it drops a "started" within 3 s
// of the last one it forwarded, and a "stopped" with no "started" standing). 404: not a
// member. Most apps call Keystroke and StopTyping instead. It needs the WebSocket:
// ErrNotConnected without one.
func (c *Client) SendTyping(ctx context.Context, convID, state string) (forwarded bool, err error) {
	cn := c.conn.Load()
	if cn == nil {
		return false, ErrNotConnected
	}
	var r protocol.TypingResult
	err = cn.request(ctx, protocol.OpTyping, protocol.TypingRequest{ConvID: convID, State: state}, &r)
	return r.Forwarded, err
}

// Keystroke tells the other members of convID, throttled, that the user is typing: a
// "started" at most once per TypingEvery while keystrokes come, and a "stopped" once
// TypingIdle has passed without one (or at StopTyping, or when a message is sent to convID
// through this Client). It never blocks: the frames go out on a goroutine of their own,
// best effort (a failure is logged at debug level and forgotten, since typing expires by
// itself).
func (c *Client) Keystroke(convID string) {
	now := time.Now()
	c.typing.mu.Lock()
	defer c.typing.mu.Unlock()
	if c.typing.convs == nil {
		c.typing.convs = make(map[string]*typist)
	}
	t := c.typing.convs[convID]
	if t == nil {
		t = &typist{}
		c.typing.convs[convID] = t
	}
	if t.idle != nil {
		t.idle.Stop()
	}
	t.idle = time.AfterFunc(TypingIdle, func() { c.StopTyping(convID) })
	if now.Sub(t.sent) >= TypingEvery {
		t.sent = now
		c.queueTypingLocked(convID, protocol.TypingStarted)
	}
}

// StopTyping sends "stopped" for convID if a Keystroke sent "started" that was not stopped
// yet; otherwise it does nothing. It never blocks, like Keystroke.
func (c *Client) StopTyping(convID string) {
	c.typing.mu.Lock()
	defer c.typing.mu.Unlock()
	t := c.typing.convs[convID]
	if t == nil {
		return
	}
	delete(c.typing.convs, convID)
	if t.idle != nil {
		t.idle.Stop()
	}
	c.queueTypingLocked(convID, protocol.TypingStopped)
}

// queueTypingLocked sends state for convID on a goroutine of its own, after the frames
// of convID queued before it: a "stopped" that overtook its "started" would be dropped, and
// leave the "started" standing. c.typing.mu must be held.
func (c *Client) queueTypingLocked(convID, state string) {
	if c.typing.last == nil {
		c.typing.last = make(map[string]chan struct{})
	}
	prev, done := c.typing.last[convID], make(chan struct{})
	c.typing.last[convID] = done
	go func() {
		if prev != nil {
			<-prev
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
		if _, err := c.SendTyping(ctx, convID, state); err != nil {
			c.log.Debug("parley: typing not sent", "conv_id", convID, "state", state, "err", err)
		}
		cancel()
		close(done)
		c.typing.mu.Lock()
		if c.typing.last[convID] == done {
			delete(c.typing.last, convID)
		}
		c.typing.mu.Unlock()
	}()
}
