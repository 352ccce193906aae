package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// handleFrame serves one client frame and returns the reply to send, or nil for a send
// frame, which is started here and answered by the answerer (inflight.go), even when it is
// refused, so that its reply keeps its place among the sends'. Any other frame first waits
// until every send before it has been answered: it sees their effects, and its reply comes
// after theirs.
func (c *wsConn) handleFrame(data []byte) (out []byte) {
	var id string
	defer func() {
		if v := recover(); v != nil {
			out = c.errorReply("", id, c.recovered("serving websocket frame", v))
			c.sends.wait() // the reply must not overtake those of the sends before it
		}
	}()
	f, err := decodeClientFrame(data)
	id = f.ID
	if lerr := c.g.allow(c.me, f.Op == protocol.OpSend); lerr != nil {
		err = lerr
	}
	if f.Op == protocol.OpSend {
		c.startSend(f, err)
		return nil
	}
	c.sends.wait()
	var result any
	if err == nil {
		err = c.g.weighed(c.ctx, c.me, true, func(ctx context.Context) (err error) {
			result, err = c.dispatch(ctx, f)
			return err
		})
	}
	if err == nil {
		if out, err = encodeReply(id, result); err == nil {
			return out
		}
	}
	return c.errorReply(f.Op, id, err)
}

// errorReply is the reply to the frame id of op that failed with err. An unexpected
// failure (500) is logged, unless it was a panic, which recovered has logged.
func (c *wsConn) errorReply(op, id string, err error) []byte {
	code := statusOf(err)
	if code == 500 && !errors.Is(err, errPanicked) {
		c.g.log.Error("gateway: websocket op failed", "op", op, "user", c.me.UserID, "err", err)
	}
	return encodeErrorReply(id, code, errorMessage(err, code), retryAfterOf(err))
}

// dispatch runs one op (section 9) but send (inflight.go) with the params
// decodeClientFrame decoded, and returns its result. Params refused are answered here,
// after the limits, as an op's own error.
func (c *wsConn) dispatch(ctx context.Context, f clientFrame) (any, error) {
	if f.paramsErr != nil {
		return nil, f.paramsErr
	}
	svc, me := c.g.svc, c.me
	switch p := f.params.(type) {
	case protocol.PositionRequest:
		if f.Op == protocol.OpRead {
			n, err := svc.MarkRead(ctx, me, p.ConvID, *p.Seq)
			return protocol.ReadPosition{ReadSeq: n}, err
		}
		n, err := svc.MarkDelivered(ctx, me, p.ConvID, *p.Seq)
		return protocol.DeliveredPosition{DeliveredSeq: n}, err
	case protocol.RecallRequest:
		return empty{}, svc.Recall(ctx, me, p.ConvID, *p.Seq)
	case protocol.ConvRequest:
		if f.Op == protocol.OpOpen {
			return c.openConversation(ctx, p.ConvID)
		}
		svc.Hub().CloseConversation(c.sub, p.ConvID)
		return empty{}, nil
	case protocol.PresenceSubscribeRequest, protocol.PresenceSetRequest:
		return c.presenceOp(ctx, f.Op, p)
	case protocol.TypingRequest:
		return c.sendTyping(ctx, p)
	case protocol.SyncParams:
		resp, err := svc.Sync(ctx, me, *p.Cursor, p.Mark, min(p.Limit, protocol.MaxSyncLimit), 0)
		if resp.Events == nil {
			resp.Events = []protocol.SyncEvent{}
		}
		return resp, err
	}
	if f.Op != protocol.OpPing { // the one op without params
		return nil, fmt.Errorf("gateway: op %q decoded but not dispatched", f.Op)
	}
	return pong{Op: protocol.OpPong}, nil
}

// maxOpen is how many conversations a connection may have open at once.
const maxOpen = 32

// openConversation serves the "open" op: convID's messages are pushed in full from now on
// (for a read-fanout conversation; a write-fanout one is pushed anyway), and the answer is
// the caller's brief, read after the room counts the connection in, so that every message
// after its max_seq is pushed.
func (c *wsConn) openConversation(ctx context.Context, convID string) (protocol.ConversationBrief, error) {
	h := c.g.svc.Hub()
	if n, open := c.sub.Opened(convID); !open && n >= maxOpen {
		return protocol.ConversationBrief{}, fmt.Errorf("%w: too many open conversations (%d): close one first", chat.ErrConflict, maxOpen)
	}
	h.OpenConversation(c.sub, convID)
	b, err := c.g.svc.GetConversation(ctx, c.me, convID)
	if err != nil {
		h.CloseConversation(c.sub, convID)
	}
	return b, err
}

// sendTyping serves the "typing" op: a member's change goes to the other members unless the
// device's limit drops it (chat.TypingLimiter), which the reply tells; a non-member gets
// 404 either way. Only the reader calls it, so it alone uses c.typing.
func (c *wsConn) sendTyping(ctx context.Context, p protocol.TypingRequest) (protocol.TypingResult, error) {
	svc, on := c.g.svc, p.State == protocol.TypingStarted
	allow := func() bool { return c.typing.Allow(p.ConvID, on, svc.Now()) }
	forwarded, err := svc.Typing(ctx, c.me, p.ConvID, on, allow)
	return protocol.TypingResult{Forwarded: forwarded}, err
}

// stopTyping tells the members of the conversations the closed connection was typing in
// that it stopped, rather than leave them to expire.
func (c *wsConn) stopTyping() {
	svc := c.g.svc
	for _, convID := range c.typing.Standing(svc.Now()) {
		_, _ = svc.Typing(c.ctx, c.me, convID, false, nil)
	}
}
