package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// WebSocket close codes the server sends, beside the standard ones (1000 normal, 1001 going
// away at shutdown, 1008 policy after an error push, 1009 frame too large, 1011 internal).
const (
	CloseReplaced = 4001 // a newer connection of the same device took over
	CloseTooSlow  = 4002 // the client did not read its frames fast enough; reconnect with the cursor
	CloseRevoked  = 4003 // the user's tokens were revoked
	CloseExpired  = 4004 // the connection's token expired; reconnect with a fresh one
)

// maxRefusedPings is how many WebSocket pings in a row a connection may send past its
// request limit (each unanswered) before it is closed with 1008: a client that keeps
// pinging into the limit is flooding, not keeping the connection alive.
const maxRefusedPings = 64

// closeGrace bounds the close handshake: the wait for the client's close frame.
const closeGrace = time.Second

// newUpgrader returns the gorilla/websocket upgrader. gorilla/websocket is used because it
// is mature and widely deployed, has client and server in one package (the Go client SDK
// uses the same library), and offers what the connection loop needs: read limits, deadlines,
// ping/pong handlers, and WriteControl that is safe beside the one writer.
//
// Any Origin is accepted: clients authenticate with a bearer token (header or ?token=),
// never with cookies, so a cross-site page cannot borrow a user's credentials.
func newUpgrader(g *Gateway) websocket.Upgrader {
	return websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   128,          // enough for a control frame; corkConn buffers reads below it
		WriteBufferPool:  &sync.Pool{}, // idle connections hold no write buffer
		CheckOrigin:      func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			g.writeError(w, r, &statusError{code: status, msg: reason.Error()})
		},
	}
}

// serveWS authenticates, then upgrades, then serves the connection until it ends. A bad
// token is refused with a plain HTTP 401 and no upgrade.
//
// The hub subscription is made before the upgrade answers, and before any cursor is read,
// so that no event can fall between the catch-up (or the latest cursor) and live pushes,
// and so that without ?cursor every event committed after the client saw the connection
// open is pushed. The token is checked again once subscribed: a revocation that kicked the
// user's subscriptions just before Subscribe is caught here (RevokeTokens invalidates the
// tokens before it kicks), and one after it ends the subscription.
func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	sess, err := g.authenticate(r, true)
	me := sess.Identity
	if err == nil {
		err = g.allow(me, false)
	}
	var cursor, mark *int64
	if err == nil && r.URL.Query().Get("cursor") != "" {
		var n int64
		n, err = queryInt(r.URL.Query(), "cursor", 0, 0)
		cursor = &n
	}
	if err == nil && r.URL.Query().Get("mark") != "" {
		var n int64
		n, err = queryInt(r.URL.Query(), "mark", 0, 0)
		mark = &n
	}
	if err == nil && !g.reserve() {
		err = errDraining
	}
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	c := &wsConn{
		g:      g,
		me:     me,
		sess:   sess,
		key:    deviceKey{me.UserID, me.DeviceID},
		cursor: cursor,
		since:  time.Now().UnixNano(),
		done:   make(chan struct{}),
	}
	c.finished.Add(1)
	c.writer.Store(writerRunning) // until run starts the first writer, wake starts none
	c.sub = g.svc.Hub().WatchDevice(me.UserID, me.DeviceID, c.since, sess.Gen(), g.cfg.SendQueue, c.wake)
	g.svc.AwaitSubscriptions() // other nodes' commits from now on wake it too
	if _, err = g.svc.CheckSession(r.Context(), sess); err == nil && cursor == nil {
		c.last, err = g.svc.LatestCursor(r.Context(), me.UserID)
	}
	if err == nil {
		err = c.followReadFanout(r.Context(), mark)
		g.svc.AwaitSubscriptions() // the rooms' too
	}
	if err != nil {
		c.sub.Close()
		g.wg.Done()
		g.writeError(w, r, err)
		return
	}
	if cursor != nil {
		g.presence.Took(me.UserID, me.DeviceID, *cursor) // the device has what it resumes after
	}
	c.order = g.upgrades.Add(1) // before the upgrade answers, so before any later dial starts
	c.ws, err = g.upgrader.Upgrade(w, r, nil)
	if err != nil {
		c.sub.Close()
		g.wg.Done()
		return // the upgrader has answered
	}
	c.cork, _ = c.ws.UnderlyingConn().(*corkConn) // nil if the server was not built by New
	// The connection is served on fresh goroutines and this handler returns: its goroutine
	// has a stack grown by the HTTP and store calls above, which an idle connection would
	// otherwise keep.
	go c.serve()
}

// serve runs the connection until it ends, then releases what serveWS reserved.
func (c *wsConn) serve() {
	g := c.g
	defer g.wg.Done()
	defer c.sub.Close()
	var cancel context.CancelFunc
	c.ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.met.ConnectionOpened()
	defer g.met.ConnectionClosed()
	g.register(c)
	defer g.unregister(c)
	g.presence.Open(c.me.UserID, c.me.DeviceID) // the pusher leaves a connected device alone
	defer g.presence.Close(c.me.UserID, c.me.DeviceID)
	c.run()
}

// reserve counts a connection about to be served, unless the gateway is draining.
func (g *Gateway) reserve() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining.Load() {
		return false
	}
	g.wg.Add(1)
	return true
}

// register tracks c and closes the device's older connection with 4001. Older means
// upgraded earlier: two connections may register in either order, since each registers on
// its own goroutine after answering the upgrade. The other nodes are told too (through the
// bus, if there is one): there, the device's connections opened before c are ended
// (hub.Replace), which closes them with 4001 as well.
func (g *Gateway) register(c *wsConn) {
	g.mu.Lock()
	g.conns[c] = struct{}{}
	old := g.devices[c.key]
	if old != nil && old.order > c.order {
		old = c // a newer connection of the device registered first: c is replaced
	} else {
		g.devices[c.key] = c
	}
	draining := g.draining.Load()
	g.mu.Unlock()
	if old != c {
		g.svc.DeviceConnected(c.me, c.since)
	}
	if old != nil {
		old.close(CloseReplaced, "replaced", nil)
	}
	if draining { // Shutdown ran between reserve and here, and did not see c
		c.close(websocket.CloseGoingAway, "server shutting down", nil)
	}
}

func (g *Gateway) unregister(c *wsConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
	if g.devices[c.key] == c {
		delete(g.devices, c.key)
	}
}

// wsConn is one WebSocket connection. The reader, a goroutine for as long as the connection
// lasts, decodes frames and calls the service, in order. The writer is the only one writing
// data frames: replies, and the hub subscription turned into gapless event pushes; it runs
// on a goroutine of its own only while it has something to write, started by wake when a
// reply is queued, an event published, a ping due or the connection ending, so that an idle
// connection keeps one goroutine, not two (each has a stack of at least 4 KiB). Replies
// reach the writer through a bounded queue that the reader never waits on (a full queue
// means the client does not read: it is disconnected); pushes come from the hub
// subscription, whose overflow also disconnects the client. A third goroutine, the
// answerer, runs only while send frames are in flight (inflight.go). Control frames (ping,
// and gorilla's pong and close answers) use WriteControl, which is safe beside the writer.
type wsConn struct {
	g     *Gateway
	ws    *websocket.Conn
	cork  *corkConn // ws's network connection; the writer holds it while frames are waiting
	me    chat.Identity
	order uint64       // upgrade order: of two connections of one device, the later one stays
	since int64        // when it opened (Unix nanoseconds): orders a device's connections across nodes
	sess  chat.Session // re-checked before every frame: a revoked or expired token stops acting
	key   deviceKey
	ctx   context.Context // for service calls; cancelled once the connection has ended

	sub     *hub.Subscription // the user's events, which the writer pushes
	replies replyQueue        // replies for the writer to write, in frame order

	// writer is writerIdle, writerRunning or writerWoken: whether a writer goroutine runs
	// (see wake).
	writer  atomic.Int32
	pingDue atomic.Bool // set by tick; the writer that sends the ping clears it
	// timer runs tick, which pings and re-checks the token when each is due; nextPing and
	// nextCheck are tick's own, as times since the gateway's epoch.
	timer     *time.Timer
	nextPing  time.Duration
	nextCheck time.Duration
	// Used by one writer at a time (wake orders them):
	cursor *int64 // where to catch up from, until the first writer has
	last   int64  // the cursor of the last event pushed
	told   int64  // the last told to the gateway's Presence

	closeOnce sync.Once
	done      chan struct{} // closed by close: the connection is ending
	// Set once by close, before done is closed; read only after <-done.
	closeCode   int
	closeReason string
	lastFrame   []byte // written just before the close frame, if not nil

	finished sync.WaitGroup // done when the writer has finished the connection (finish)
	grace    *time.Timer    // set by finish: closes the socket if the client's close answer is late

	refusedPings int // pings refused in a row by the request limit; used by the reader only

	sends inflight // the send frames started and not yet answered

	// Used by one writer at a time, like cursor and last:
	changes *protocol.ChangesPush // pushed after the first catch-up, for a connection made with ?mark=
	held    []*hub.Event          // ephemeral pushes taken while catching up, written once it is done; at most SendQueue
}

// maxOpen is how many conversations a connection may have open at once.
const maxOpen = 32

// followReadFanout makes the connection's subscription follow the rooms of the user's
// read-fanout conversations (hub.Follow), and, for a connection made with a mark, keeps the
// "changes" push to send after the catch-up. It runs after the subscription is made, so a
// join or leave committed since is in the events the writer will push, which it applies
// after this (observe): the last word on each conversation is the newest.
func (c *wsConn) followReadFanout(ctx context.Context, mark *int64) error {
	from := int64(-1)
	if mark != nil {
		from = *mark
	}
	st, err := c.g.svc.ReadFanoutState(ctx, c.me, from)
	if err != nil {
		return err
	}
	for _, f := range st.Follow {
		c.g.svc.Hub().Follow(c.sub, f.ConvID, f.Seen, f.MaxSeq)
	}
	if mark != nil {
		c.changes = &protocol.ChangesPush{Op: protocol.OpChanges, Mark: st.Mark, Conversations: st.Changed}
	}
	return nil
}

// close ends the connection with code and reason, after sending last (an error push) if
// it is not nil. Only the first call counts.
func (c *wsConn) close(code int, reason string, last []byte) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason, c.lastFrame = code, reason, last
		close(c.done)
		c.wake() // the writer finishes the connection
	})
}

func (c *wsConn) closing() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// run serves the connection until it has ended: the reader on this goroutine, the writer
// on goroutines of its own. The first writer catches up from the cursor if there is one,
// or pushes what was committed since serveWS read the latest cursor.
func (c *wsConn) run() {
	c.startTimer()
	go c.runWriter()
	c.readLoop()
	c.finished.Wait()
	c.grace.Stop()
	_ = c.ws.Close()
}

// guard recovers a panic in one of the connection's goroutines: it is logged and the
// connection closed with 1011, never the process.
func (c *wsConn) guard(role string) {
	if v := recover(); v != nil {
		c.g.log.Error("gateway: panic in websocket "+role, "user", c.me.UserID, "device", c.me.DeviceID,
			"panic", v, "stack", string(debug.Stack()))
		c.close(websocket.CloseInternalServerErr, "internal error", nil)
	}
}

// ---- reader ----

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

// ---- writer ----

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
		if replies == nil && events == nil && notices == nil {
			return c.subscribed(c.sub)
		}
		if err := c.writeWaiting(replies, events, notices); err != nil {
			c.close(CloseTooSlow, "write failed", nil) // usually the peer is gone; if not, it is too slow
			return false
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

// ---- pushes ----

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

// fail sends {"op":"error","code","error"} for err and closes: 410 (cursor older than the
// log) and 409 (cursor ahead) with 1008, anything else with 1011.
func (c *wsConn) fail(err error) {
	if c.closing() {
		return
	}
	code := statusOf(err)
	closeCode := websocket.ClosePolicyViolation
	if code >= 500 {
		closeCode = websocket.CloseInternalServerErr
		if code == 500 {
			c.g.log.Error("gateway: websocket sync failed", "user", c.me.UserID, "err", err)
		}
	}
	msg := errorMessage(err, code)
	c.close(closeCode, truncate(msg, 120), encodeErrorPush(code, msg))
}

// subscriptionEnded closes the connection when the hub ends its subscription.
func (c *wsConn) subscriptionEnded(err error) {
	switch {
	case errors.Is(err, hub.ErrOverflow):
		c.close(CloseTooSlow, "too slow: reconnect with your cursor", nil)
	case errors.Is(err, hub.ErrKicked):
		c.close(CloseRevoked, "revoked", nil)
	case errors.Is(err, hub.ErrReplaced):
		c.close(CloseReplaced, "replaced", nil)
	default:
		c.close(websocket.CloseGoingAway, "server shutting down", nil)
	}
}

// truncate cuts s to at most n bytes on a rune boundary (close reasons are limited to 123
// bytes).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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
