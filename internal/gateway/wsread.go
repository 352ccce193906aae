package gateway

import (
	"errors"
	"net"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

func (c *wsConn) extendDeadline() {
	_ = c.ws.SetReadDeadline(time.Now().Add(c.g.cfg.IdleTimeout))
}

func (c *wsConn) readLoop() {
	// The sends in flight end before the reader does. guard runs first: on a panic it ends
	// the connection, and an answerer waiting for room in the reply queue stops waiting.
	defer c.sends.wait()
	defer c.guard("reader")
	c.ws.SetReadLimit(protocol.MaxFrameBytes)
	c.extendDeadline()
	c.ws.SetPongHandler(func(string) error {
		c.extendDeadline()
		return nil
	})
	c.ws.SetPingHandler(c.answerPing)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.close(readCloseCode(err))
			return
		}
		c.extendDeadline()
		if c.closing() || !c.authorized() {
			continue // finishing the close handshake: frames are no longer served
		}
		out := c.handleFrame(data)
		if out == nil {
			continue // a send: the answerer replies
		}
		// Wait for room rather than drop the client: replies pile up while the writer is
		// busy, which a pipelining client cannot tell from a slow server (measured: a
		// writer filling a gap from PostgreSQL while 100 pipelined sends were refused at
		// once). A client that does not read at all holds the writer past --write-timeout,
		// which closes the connection and ends the wait.
		if !c.replies.put(out, c.done) {
			continue
		}
		c.wake()
	}
}

// maxRefusedPings is how many WebSocket pings in a row a connection may send past its
// request limit (each unanswered) before it is closed with 1008: a client that keeps
// pinging into the limit is flooding, not keeping the connection alive.
const maxRefusedPings = 64

// answerPing answers a control-frame ping with a pong, if the token still holds and the
// device's request limit allows; a ping past the limit gets no pong, and too many of those
// in a row close the connection with 1008. It runs on the reader's goroutine.
func (c *wsConn) answerPing(data string) error {
	c.extendDeadline()
	if c.closing() || !c.authorized() {
		return nil
	}
	if err := c.g.allow(c.me, false); err != nil {
		c.refusedPings++
		if c.refusedPings >= maxRefusedPings {
			c.close(websocket.ClosePolicyViolation, "too many pings", nil)
		}
		return nil
	}
	c.refusedPings = 0
	_ = c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.g.cfg.WriteTimeout))
	return nil // a failed pong shows up as a failed read or write soon enough
}

// authorized re-verifies the connection's token before it acts on a frame. Once the token
// no longer holds, the connection closes at once, without answering: 4003 when revoked,
// 4004 when expired.
func (c *wsConn) authorized() bool {
	_, err := c.g.svc.CheckSession(c.ctx, c.sess)
	if err != nil {
		c.closeUnauthorized(err)
	}
	return err == nil
}

// closeUnauthorized closes for a failed CheckSession: 4004 for an expired token, 4003 for a
// revoked one, and as fail does for anything else (the store did not answer).
func (c *wsConn) closeUnauthorized(err error) {
	switch {
	case errors.Is(err, auth.ErrExpired):
		c.close(CloseExpired, "token expired", nil)
	case errors.Is(err, chat.ErrUnauthorized):
		c.close(CloseRevoked, "revoked", nil)
	default:
		c.fail(err)
	}
}

// startTimer starts the connection's one timer (tick): a first look at the token at once,
// the first ping after HeartbeatInterval. One timer for both, rather than a ticker for pings
// and another timer for the expiry, because every idle connection holds them.
func (c *wsConn) startTimer() {
	c.nextPing = time.Since(c.g.epoch) + c.g.cfg.HeartbeatInterval
	c.timer = time.AfterFunc(time.Hour, c.tick) // set before tick can run, which resets it
	c.timer.Reset(0)
}

// tick closes the connection once its token no longer holds, even if the client sends
// nothing, and has the writer ping when a ping is due; then it sets the timer for whichever
// comes next. The service's clock decides when the token expires: the timer only says when
// to look again. Timer functions run one at a time here: each sets the timer for the next.
func (c *wsConn) tick() {
	now := time.Since(c.g.epoch)
	if now >= c.nextCheck {
		left, err := c.g.svc.CheckSession(c.ctx, c.sess)
		if err != nil {
			c.closeUnauthorized(err)
			return
		}
		c.nextCheck = now + left
	}
	if now >= c.nextPing {
		c.nextPing = now + c.g.cfg.HeartbeatInterval
		c.pingDue.Store(true)
		c.wake()
	}
	c.timer.Reset(min(c.nextCheck, c.nextPing) - now)
	if c.closing() {
		c.timer.Stop() // finish may have stopped it before the Reset: it must not keep c alive
	}
}

// readCloseCode chooses how to close after a failed read.
func readCloseCode(err error) (int, string, []byte) {
	var ne net.Error
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		return websocket.CloseMessageTooBig, "frame larger than 1 MiB", nil
	case errors.As(err, &ne) && ne.Timeout():
		return websocket.CloseNormalClosure, "idle timeout", nil
	}
	return websocket.CloseNormalClosure, "", nil // the client closed or the network failed
}
