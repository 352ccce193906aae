package gateway

import (
	"context"
	"errors"
	"runtime/debug"
	"sync/atomic"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// maxInFlight is how many send frames one connection may have started and not yet
// answered. At the bound the reader stops reading frames until the oldest is answered, so
// a client that sends faster than the store commits is held back by TCP, never queued
// without bound. 32 lets a burst (a user typing fast, an outbox flushed on reconnect) share
// one or two group commits instead of paying one commit round trip per message.
const maxInFlight = 32

// inflight is a connection's sends in flight. The reader starts each send frame in frame
// order (chat.Service.StartSend, which fixes the message's place in the store's order and
// so its seq) and hands it to the answerer, a goroutine that waits for the sends in the
// same order and queues their replies: replies keep frame order. Any other frame waits
// until every send before it has been answered (wait), then is served by the reader as
// before, so that it sees their effects.
//
// The answerer runs only while sends are in flight, so an idle connection keeps only its
// reader goroutine. While it runs, the connection's sends hold the device's turn of the events
// limit together (Gateway.weighed serves a device's other writing calls one at a time):
// each send is checked against the limit when started and charged when answered, so a
// device's debt can exceed one call's events by at most the events of maxInFlight sends.
type inflight struct {
	slots chan struct{}      // holds a value per send started and not yet answered: the bound
	queue chan *inflightSend // to the answerer, in frame order
	n     atomic.Int32       // sends queued or being answered; the answerer ends when it drops to 0
	// answered is closed when the latest answerer has answered everything. Reader only.
	answered chan struct{}
}

// inflightSend is one send frame between the reader and the answerer: its reply when the
// reader refused it already, else the send to wait for.
type inflightSend struct {
	id    string
	reply []byte
	send  chat.PendingSend
	ctx   context.Context // the send's, counting its events (chat.WithEventCount)
}

// startSend starts a send frame (refused already when err is not nil) and hands it to the
// answerer. It waits while maxInFlight sends are unanswered. It runs on the reader.
func (c *wsConn) startSend(f clientFrame, err error) {
	s := &c.sends
	if s.slots == nil {
		s.slots, s.queue = make(chan struct{}, maxInFlight), make(chan *inflightSend, maxInFlight)
	}
	s.slots <- struct{}{}
	if s.n.Add(1) == 1 {
		if terr := c.beginSends(); err == nil {
			err = terr
		}
	}
	s.queue <- c.prepareSend(f, err) // never waits: the slot taken above bounds the queue
}

// beginSends starts an answerer for the sends about to be in flight, after taking the
// device's turn of the events limit for them, which the answerer leaves when it ends. It
// fails only when the connection's context has ended (the turn is then not taken).
func (c *wsConn) beginSends() error {
	leave, err := c.g.fanoutTurns.enter(c.ctx, deviceKeyString(c.me))
	if err != nil {
		leave = func() {}
	}
	answered := make(chan struct{})
	c.sends.answered = answered
	go c.answerSends(leave, answered)
	return err
}

// prepareSend checks the send frame f against the events limit and starts it, or makes
// its reply if it is refused. It turns a panic into a 500 reply: whatever happens, the
// reader must hand the frame on, or the answerer would wait for it for ever.
func (c *wsConn) prepareSend(f clientFrame, err error) (p *inflightSend) {
	p = &inflightSend{id: f.ID}
	defer func() {
		if v := recover(); v != nil {
			p = &inflightSend{id: f.ID, reply: c.errorReply(f.Op, f.ID, c.recovered("starting a send", v))}
		}
	}()
	if err == nil {
		err = f.paramsErr
	}
	if err == nil {
		err = c.g.solvent(deviceKeyString(c.me))
	}
	if err == nil {
		req, _ := f.params.(protocol.SendRequest)
		p.ctx = chat.WithEventCount(c.ctx)
		p.send, err = c.g.svc.StartSend(p.ctx, c.me, req)
	}
	if err != nil {
		p.reply = c.errorReply(f.Op, f.ID, err)
	}
	return p
}

// answerSends answers the connection's sends in frame order until none is left, then
// leaves the device's turn and closes answered. A reply waits for room in the reply queue
// (a client that does not read holds its sends back through the slots) unless the
// connection is ending.
func (c *wsConn) answerSends(leave func(), answered chan struct{}) {
	defer close(answered)
	defer leave()
	s := &c.sends
	for {
		if c.replies.put(c.answer(<-s.queue), c.done) { // not when ending: the reply has nowhere to go
			c.wake()
		}
		<-s.slots
		if s.n.Add(-1) == 0 {
			return
		}
	}
}

// answer waits for one send and returns its reply, charging its events to the device.
func (c *wsConn) answer(p *inflightSend) (out []byte) {
	if p.reply != nil {
		return p.reply
	}
	defer c.g.charge(p.ctx, deviceKeyString(c.me))
	defer func() {
		if v := recover(); v != nil {
			out = c.errorReply(protocol.OpSend, p.id, c.recovered("answering a send", v))
		}
	}()
	ack, err := p.send.Wait()
	if err != nil {
		return c.errorReply(protocol.OpSend, p.id, err)
	}
	ack.Code = 0
	return appendAckReply(make([]byte, 0, 128+len(p.id)+len(ack.ConvID)+len(ack.ClientMsgID)), p.id, &ack)
}

// wait returns once every send started so far has been answered. It runs on the reader.
func (s *inflight) wait() {
	if s.answered != nil {
		<-s.answered
	}
}

// recovered logs a panic of serving a frame and returns the error its reply carries (500).
func (c *wsConn) recovered(what string, v any) error {
	c.g.log.Error("gateway: panic "+what, "user", c.me.UserID, "panic", v, "stack", string(debug.Stack()))
	return errPanicked
}

// errPanicked is the error of a frame whose service panicked: a 500, logged by recovered.
var errPanicked = errors.New("gateway: panic serving a frame")
