package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/parleychat/parley/protocol"
)

// frameOverhead is an upper bound on what the frame envelope ({"id","op"}) adds to a body.
const frameOverhead = 64

// NewClientMsgID returns a random UUID (version 4) from crypto/rand, the client_msg_id form
// section 2 recommends: unique per sender without coordination.
func NewClientMsgID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (it aborts the program instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// Send stores a message in convID under a fresh client_msg_id and returns its ack. content is
// encoded with encoding/json (pass a json.RawMessage to send pre-encoded JSON); extra may be
// nil. See SendWithID for how it retries.
func (c *Client) Send(ctx context.Context, convID string, contentType int, content any, extra map[string]string) (MessageAck, error) {
	return c.SendWithID(ctx, NewClientMsgID(), convID, contentType, content, extra)
}

// SendText sends a text message: content_type ContentText with content {"text": text}, the
// shape every Parley client reads (Message.Text decodes it). It retries as Send does.
func (c *Client) SendText(ctx context.Context, convID, text string) (MessageAck, error) {
	return c.Send(ctx, convID, ContentText, TextContent{Text: text}, nil)
}

// SendWithID is Send with a caller-chosen client_msg_id, for callers that must be able to
// resend the same message after their own restart (persist the id first, then send).
//
// It sends over the WebSocket when the session is connected and over HTTP otherwise, and
// re-sends with the same id until the server acknowledges it: after a 503, a 429 (waiting
// retry_after), a network error, a connection lost before the reply, an attempt that took
// longer than Options.RequestTimeout, or while the server restarts. The server stores one
// message per (sender, client_msg_id), so retries never duplicate it; an ack for a message
// stored by an earlier attempt comes back with Duplicate set. Other 4xx answers are final and
// returned as *Error; among them 409 when clientMsgID was already used by this user in another
// conversation (the server keys messages by sender and client_msg_id, so pick a new one). When ctx ends first, the error wraps ctx's error: the message may or may
// not have been stored, and a later SendWithID with the same id finds out.
func (c *Client) SendWithID(ctx context.Context, clientMsgID, convID string, contentType int, content any, extra map[string]string) (MessageAck, error) {
	if !protocol.ValidClientMsgID(clientMsgID) {
		return MessageAck{}, &Error{Code: http.StatusBadRequest, Message: "invalid client_msg_id (checked locally)"}
	}
	m, err := newOutgoing(clientMsgID, convID, contentType, content, extra)
	if err != nil {
		return MessageAck{}, err
	}
	c.StopTyping(convID) // sending ends typing
	for attempt := 0; ; attempt++ {
		ack, err := c.sendOnce(ctx, m)
		if err == nil {
			c.rooms.sent(convID, ack.Seq, c.opts.PullDelayMax)
			return ack, nil
		}
		if ctx.Err() != nil {
			return MessageAck{}, fmt.Errorf("parley: send %s: %w (last attempt: %v)", clientMsgID, ctx.Err(), err)
		}
		wait, retry := c.retryWait(err, attempt)
		if !retry {
			return MessageAck{}, err
		}
		c.log.Debug("parley: send retry", "client_msg_id", clientMsgID, "attempt", attempt, "wait", wait, "err", err)
		if c.opts.OnRetry != nil {
			c.opts.OnRetry(err, wait)
		}
		if !sleepCtx(ctx, wait) {
			return MessageAck{}, fmt.Errorf("parley: send %s: %w (last attempt: %v)", clientMsgID, ctx.Err(), err)
		}
	}
}

// outgoing is a message encoded once for all the attempts to send it.
type outgoing struct {
	body []byte // the protocol.SendRequest as JSON
	// httpOnly is set when the message is too large for a WebSocket frame: a frame over the
	// server's limit closes the WebSocket, which would look like a drop and be retried
	// forever; over HTTP the same message gets a final 413.
	httpOnly bool
}

func newOutgoing(clientMsgID, convID string, contentType int, content any, extra map[string]string) (*outgoing, error) {
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("parley: encode content: %w", err)
	}
	req := protocol.SendRequest{
		ConvID: convID, ClientMsgID: clientMsgID, ContentType: contentType, Content: raw, Extra: extra,
	}
	// raw is json.Marshal's output, as AppendSendRequest requires.
	body := protocol.AppendSendRequest(make([]byte, 0, len(raw)+len(convID)+len(clientMsgID)+64), &req)
	return &outgoing{body: body, httpOnly: len(body)+frameOverhead > protocol.MaxFrameBytes}, nil
}

// frame returns the WebSocket frame that sends m as request id.
func (m *outgoing) frame(id string) ([]byte, error) {
	return protocol.AppendFrame(make([]byte, 0, len(m.body)+len(id)+24), id, protocol.OpSend, m.body), nil
}

// sendOnce makes one attempt, bounded by RequestTimeout so a reply that never comes (a
// half-open connection, a stuck proxy) turns into a retry rather than a hang.
func (c *Client) sendOnce(ctx context.Context, m *outgoing) (MessageAck, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	var ack MessageAck
	if cn := c.conn.Load(); cn != nil && !m.httpOnly {
		err := cn.call(ctx, m.frame, &ack)
		return ack, err
	}
	_, err := c.http.do(ctx, http.MethodPost, "/v1/messages", nil, json.RawMessage(m.body), &ack)
	return ack, err
}

// retryWait decides whether a failed send attempt is worth repeating, and after how long.
func (c *Client) retryWait(err error, attempt int) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) {
		// Network errors, timeouts, lost connections: the outcome is unknown, and resending
		// the same client_msg_id is exactly how to find it out.
		return c.opts.Backoff.Delay(attempt), true
	}
	switch {
	case e.Code == http.StatusTooManyRequests && e.RetryAfter > 0:
		return e.RetryAfter, true
	case e.Code == http.StatusTooManyRequests, e.Code == http.StatusRequestTimeout, e.Code >= 500:
		// 503 is the server's "not persisted"; other 5xx come from proxies during restarts.
		return c.opts.Backoff.Delay(attempt), true
	}
	return 0, false
}
