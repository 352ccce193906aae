package gateway

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/presence"
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
	if g.tracker != nil {
		g.tracker.Connected(c.me.UserID, c.me.DeviceID)
		defer g.tracker.Disconnected(c.me.UserID, c.me.DeviceID)
		defer func() {
			if w := c.watch.Load(); w != nil {
				w.Close()
			}
		}()
	}
	c.run()
	c.stopTyping()
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

	watch  atomic.Pointer[presence.Watcher] // made by the first presence_subscribe; nil until then
	typing chat.TypingLimiter               // the device's typing, rate-limited; used by the reader only

	// Used by one writer at a time, like cursor and last:
	changes *protocol.ChangesPush // pushed after the first catch-up, for a connection made with ?mark=
	held    []*hub.Event          // ephemeral pushes taken while catching up, written once it is done; at most SendQueue
	// presAt is when the last presence frame was written; presLater is set while a timer
	// will wake the writer once a tick has passed since, for the changes held back.
	presAt    time.Time
	presLater atomic.Bool
}

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
