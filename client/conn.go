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

	mu      sync.Mutex             // guards pending and closed
	pending map[string]chan []byte // request frame id -> where its reply goes
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
	return &wsConn{c: c, ws: ws, pending: make(map[string]chan []byte), done: make(chan struct{})}
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

// inFrame is any server frame: a push (op "event" or "error", no id) or a reply (id set).
type inFrame struct {
	ID    string     `json:"id"`
	Op    string     `json:"op"`
	Code  int        `json:"code"`
	Error string     `json:"error"`
	Event *SyncEvent `json:"event"`
}

// handle routes one frame; stop is true when the frame ends the connection.
func (cn *wsConn) handle(data []byte) (end connEnd, stop bool) {
	if ev, ok := decodePush(data); ok {
		cn.c.enqueue(ev)
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
	case f.ID != "":
		cn.resolve(f.ID, data)
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

func (cn *wsConn) resolve(id string, data []byte) {
	cn.mu.Lock()
	ch := cn.pending[id]
	delete(cn.pending, id)
	cn.mu.Unlock()
	if ch != nil {
		ch <- data // buffered, one reply per id
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
	id := "r" + strconv.FormatUint(cn.c.frameSeq.Add(1), 36)
	frame, err := encodeFrame(id, op, params)
	if err != nil {
		return err
	}
	ch := make(chan []byte, 1)
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
	case data := <-ch:
		return decodeReply(data, out)
	case <-cn.done:
		select { // the reply may have raced the close
		case data := <-ch:
			return decodeReply(data, out)
		default:
			return errConnLost
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// encodeFrame lays out {"id","op", params...}: section 9 puts parameters flat beside id and op.
func encodeFrame(id, op string, params any) ([]byte, error) {
	head, err := json.Marshal(protocol.Frame{ID: id, Op: op})
	if err != nil {
		return nil, err
	}
	if params == nil {
		return head, nil
	}
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("parley: encode %s frame: %w", op, err)
	}
	if len(p) < 2 || p[0] != '{' {
		return nil, fmt.Errorf("parley: %s params are not a JSON object", op)
	}
	if len(p) == 2 { // {}
		return head, nil
	}
	frame := append(head[:len(head)-1], ',')
	return append(frame, p[1:]...), nil
}

// decodeReply turns a reply frame into out, or into an *Error when its code is not 0.
func decodeReply(data []byte, out any) error {
	var r protocol.ReplyFrame
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("parley: decode reply: %w", err)
	}
	if r.Code != 0 {
		return &Error{Code: r.Code, Message: r.Error, RetryAfter: time.Duration(r.RetryAfter) * time.Second}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("parley: decode reply: %w", err)
	}
	return nil
}
