package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/protocol"
)

const (
	writeWait = 10 * time.Second // bound on one frame write
	// maxPushBytes bounds a frame read from the server. A push carries one event (content is
	// at most 64 KiB), so this only guards against a broken server.
	maxPushBytes = 16 << 20
	// keepaliveID is the frame id of the client's own pings; its pong matches no request.
	keepaliveID = "keepalive"
)

// wsConn is one open WebSocket. Its reader routes replies to the requests waiting for them
// and pushes to the Client's event queue; writers share writeMu, since gorilla allows one
// concurrent writer.
type wsConn struct {
	c  *Client
	ws *websocket.Conn

	writeMu sync.Mutex // serialises data-frame writes

	mu      sync.Mutex            // guards pending and closed
	pending map[string]chan reply // request frame id -> where its reply goes
	closed  bool

	done chan struct{} // closed once the connection has ended
}

// connEnd says why a connection ended, which decides what the session does next.
type connEnd int

const (
	endDropped      connEnd = iota // network failure, server close, idle timeout: reconnect
	endReset                       // the server refused our cursor (409/410): resnapshot
	endReplaced                    // close 4001: stop
	endUnauthorized                // 401 push, close 4003 or 4004: stop
	endStopped                     // the session is ending
)

func newWSConn(c *Client, ws *websocket.Conn) *wsConn {
	ws.SetReadLimit(maxPushBytes)
	return &wsConn{c: c, ws: ws, pending: make(map[string]chan reply), done: make(chan struct{})}
}

// serve runs the connection until it ends, then fails every request still waiting on it.
func (cn *wsConn) serve(ctx context.Context) connEnd {
	stop := context.AfterFunc(ctx, func() {
		// A polite close first, so the server logs a normal closure rather than a reset.
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		_ = cn.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		cn.ws.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	wg.Go(cn.keepalive)
	wg.Go(func() { cn.c.reopen(ctx, cn) })          // open state lives with the connection
	wg.Go(func() { cn.c.restorePresence(ctx, cn) }) // and so do presence subscriptions
	end := cn.readLoop()
	cn.shutdown()
	wg.Wait()
	if ctx.Err() != nil {
		return endStopped
	}
	return end
}

// shutdown closes the socket and wakes every request waiting on it (they see errConnLost).
func (cn *wsConn) shutdown() {
	cn.mu.Lock()
	if !cn.closed {
		cn.closed = true
		close(cn.done)
	}
	cn.mu.Unlock()
	cn.ws.Close()
}

// keepalive pings the server at half the idle timeout, so that neither side's idle timer
// fires on a quiet but healthy connection, and NAT mappings stay open.
func (cn *wsConn) keepalive() {
	t := time.NewTicker(max(cn.c.opts.IdleTimeout/2, time.Millisecond))
	defer t.Stop()
	frame := []byte(`{"id":"` + keepaliveID + `","op":"ping"}`)
	for {
		select {
		case <-cn.done:
			return
		case <-t.C:
			_ = cn.write(frame) // a failed write closes the connection; the reader reports it
		}
	}
}

func (cn *wsConn) readLoop() connEnd {
	idle := cn.c.opts.IdleTimeout
	_ = cn.ws.SetReadDeadline(time.Now().Add(idle))
	cn.ws.SetPingHandler(func(data string) error {
		_ = cn.ws.SetReadDeadline(time.Now().Add(idle))
		err := cn.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		var netErr net.Error
		if err == nil || errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &netErr) {
			return nil // as gorilla's default handler: the read side reports a dead socket
		}
		return err
	})
	for {
		_, data, err := cn.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				switch ce.Code {
				case closeReplaced:
					return endReplaced
				case closeRevoked, closeExpired: // a redial would only get 401
					return endUnauthorized
				}
			}
			cn.c.log.Debug("parley: websocket ended", "err", err)
			return endDropped
		}
		_ = cn.ws.SetReadDeadline(time.Now().Add(idle))
		if end, stop := cn.handle(data); stop {
			return end
		}
	}
}

// inFrame is any server frame: a push (op "event", "error", "typing", "presence", or one of
// read fanout's "message", "notice", "changes", "receipts"; no id) or a reply (id set).
type inFrame struct {
	ID         string     `json:"id"`
	Op         string     `json:"op"`
	Code       int        `json:"code"`
	Error      string     `json:"error"`
	RetryAfter int        `json:"retry_after"`
	Event      *SyncEvent `json:"event"`

	Message       *Message            `json:"message"`       // "message"
	Mark          int64               `json:"mark"`          // "changes"
	Conversations []ConversationBrief `json:"conversations"` // "changes"
	ConvID        string              `json:"conv_id"`       // "receipts"
	Receipts      []Receipts          `json:"receipts"`      // "receipts"
	Presence      []Presence          `json:"presence"`      // "presence", and the answer of "presence_subscribe"
}

// reply is a reply frame as the reader decoded it: its envelope, and the whole frame for
// the result's fields, which only the request that waits for it knows how to decode, unless
// it is the ack of a send that the reader has read already.
type reply struct {
	code       int
	msg        string
	retryAfter int // seconds
	data       []byte
	ack        MessageAck // the result, when isAck: the frame is laid out as a send's ack
	isAck      bool
}

// handle routes one frame; stop is true when the frame ends the connection. data is the
// reader's own (gorilla allocates each message anew): events keep slices of it.
func (cn *wsConn) handle(data []byte) (end connEnd, stop bool) {
	// Most frames are message pushes and acks, read without reflection.
	if ev, ok := protocol.ReadEventPush(data); ok {
		cn.c.enqueue(ev)
		return 0, false
	}
	if id, ack, ok := protocol.ReadAck(data); ok {
		cn.resolve(id, reply{data: data, ack: ack, isAck: true})
		return 0, false
	}
	var f inFrame
	if err := json.Unmarshal(data, &f); err != nil {
		cn.c.log.Warn("parley: unreadable frame from server", "err", err)
		return 0, false
	}
	switch {
	case f.Op == protocol.OpEvent && f.Event != nil:
		cn.c.enqueue(*f.Event)
	case f.ID == "" && f.Op != protocol.OpError && f.Op != "":
		cn.c.readFanoutPush(f.Op, &f, data)
	case f.ID != "":
		if f.Code == 0 {
			cn.c.presenceFrame(f.Presence) // on the reader, before any push that follows it
		}
		cn.resolve(f.ID, reply{code: f.Code, msg: f.Error, retryAfter: f.RetryAfter, data: data})
	case f.Op == protocol.OpError:
		cn.c.log.Info("parley: server refused the session", "code", f.Code, "error", f.Error)
		switch f.Code {
		case http.StatusGone, http.StatusConflict:
			return endReset, true
		case http.StatusUnauthorized:
			return endUnauthorized, true
		}
	default:
		// A reply with an empty id answers a frame the server could not parse; we never
		// send one, so there is nobody to tell.
		cn.c.log.Debug("parley: unexpected frame", "frame", string(data))
	}
	return 0, false
}

func (cn *wsConn) resolve(id string, r reply) {
	cn.mu.Lock()
	ch := cn.pending[id]
	delete(cn.pending, id)
	cn.mu.Unlock()
	if ch != nil {
		ch <- r // buffered, one reply per id
	}
}

// write sends one text frame. A failed write closes the socket so that the reader ends the
// connection: after a partial write the stream is unusable anyway.
func (cn *wsConn) write(frame []byte) error {
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	_ = cn.ws.SetWriteDeadline(time.Now().Add(writeWait))
	if err := cn.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
		cn.ws.Close()
		return err
	}
	return nil
}

// request sends op with params and waits for its reply, decoding a success into out. An
// error reply is an *Error; a connection that ends first gives errConnLost.
func (cn *wsConn) request(ctx context.Context, op string, params, out any) error {
	return cn.call(ctx, func(id string) ([]byte, error) { return encodeFrame(id, op, params) }, out)
}

// call is request with the frame built by encode for the id it is given.
func (cn *wsConn) call(ctx context.Context, encode func(id string) ([]byte, error), out any) error {
	id := "r" + strconv.FormatUint(cn.c.frameSeq.Add(1), 36)
	frame, err := encode(id)
	if err != nil {
		return err
	}
	ch := make(chan reply, 1)
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return errConnLost
	}
	cn.pending[id] = ch
	cn.mu.Unlock()
	defer func() {
		cn.mu.Lock()
		delete(cn.pending, id)
		cn.mu.Unlock()
	}()
	if err := cn.write(frame); err != nil {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	select {
	case r := <-ch:
		return r.decode(out)
	case <-cn.done:
		select { // the reply may have raced the close
		case r := <-ch:
			return r.decode(out)
		default:
			return errConnLost
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// encodeFrame lays out {"id","op", params...}: section 9 puts parameters flat beside id and op.
func encodeFrame(id, op string, params any) ([]byte, error) {
	if params == nil {
		return protocol.AppendFrame(nil, id, op, nil), nil
	}
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("parley: encode %s frame: %w", op, err)
	}
	if len(p) < 2 || p[0] != '{' {
		return nil, fmt.Errorf("parley: %s params are not a JSON object", op)
	}
	return protocol.AppendFrame(make([]byte, 0, len(id)+len(op)+len(p)+20), id, op, p), nil
}

// decode turns the reply into out (which may be nil), or into an *Error when its code is
// not 0. The envelope was decoded by the reader: only the result's fields are left.
func (r reply) decode(out any) error {
	if r.code != 0 {
		return &Error{Code: r.code, Message: r.msg, RetryAfter: time.Duration(r.retryAfter) * time.Second}
	}
	if out == nil {
		return nil
	}
	if p, ok := out.(*MessageAck); ok && r.isAck {
		*p = r.ack
		return nil
	}
	if err := json.Unmarshal(r.data, out); err != nil {
		return fmt.Errorf("parley: decode reply: %w", err)
	}
	return nil
}
