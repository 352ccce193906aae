// Package gateway is Parley's network edge: the HTTP JSON API and the WebSocket endpoint of
// docs/protocol.md. It authenticates callers, decodes and validates wire input, applies per-device
// rate limits, calls chat.Service, maps domain errors to wire codes in one table (statusOf),
// and runs each WebSocket with a reader, a writer and bounded outbound queues. It is the one
// place where wire types meet the domain.
package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/metrics"
	"github.com/parleychat/parley/internal/presence"
)

// Options are the dependencies of a Gateway.
type Options struct {
	Service     *chat.Service    // required
	AdminSecret string           // the operator's bearer secret; empty refuses every admin call
	Config      Config           // the zero value means DefaultConfig()
	Logger      *slog.Logger     // default slog.Default()
	Metrics     *metrics.Metrics // default: a fresh metrics.New()
	Push        Push             // nil: offline push is off (push.go)
	Presence    Presence         // told which devices take events live; nil: nobody is
	Attachments Attachments      // nil: attachments are off and their routes answer 404
	// Tracker holds users' presence (docs/protocol.md 9.11); nil: presence is off and its
	// ops and routes answer 404.
	Tracker *presence.Tracker
}

// Gateway serves the Parley API. It implements http.Handler; Shutdown drains it.
type Gateway struct {
	svc         *chat.Service
	adminSecret string
	cfg         Config
	log         *slog.Logger
	met         *metrics.Metrics
	push        Push              // nil when off
	presence    Presence          // never nil
	attachments Attachments       // nil when off
	tracker     *presence.Tracker // nil when off
	mux         *http.ServeMux
	upgrader    websocket.Upgrader
	requests    *limiter      // nil when off
	sends       *limiter      // nil when off
	polls       *longPolls    // waiting long-polls per device and user
	fanout      *limiter      // events created per device; nil when off
	fanoutTurns *turns        // one weighed call at a time per device; nil when fanout is off
	convChanges *limiter      // metadata changes per conversation; nil when off
	creations   *limiter      // conversations created per user; nil when off
	historyLim  *limiter      // history pages read per user; nil when off
	upgrades    atomic.Uint64 // WebSocket upgrades so far, to order a device's connections

	drainCtx context.Context // cancelled by Shutdown: waiting long-polls answer at once
	drain    context.CancelFunc
	draining atomic.Bool // set (under mu) by Shutdown: new requests get 503

	mu      sync.Mutex // guards conns and devices; wg.Add happens under it
	conns   map[*wsConn]struct{}
	devices map[deviceKey]*wsConn // the current connection of each device
	wg      sync.WaitGroup        // one count per WebSocket connection being served

	epoch time.Time // connections keep their timer's times as durations since it (wsConn.tick)
}

// deviceKey names one device of one user.
type deviceKey struct{ user, device string }

// New returns a Gateway. It panics if o.Service is nil or o.Config is invalid: both are
// programming errors, since cmd/parley validates the configuration it parses.
func New(o Options) *Gateway {
	if o.Service == nil {
		panic("gateway: Options.Service is required")
	}
	if o.Config == (Config{}) {
		o.Config = DefaultConfig()
	}
	if err := o.Config.Validate(); err != nil {
		panic("gateway: invalid config: " + err.Error())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	g := &Gateway{
		svc:         o.Service,
		adminSecret: o.AdminSecret,
		cfg:         o.Config,
		log:         o.Logger,
		met:         o.Metrics,
		push:        o.Push,
		presence:    o.Presence,
		attachments: o.Attachments,
		tracker:     o.Tracker,
		mux:         http.NewServeMux(),
		requests:    newLimiter(o.Config.RequestRate, o.Config.RequestBurst),
		sends:       newLimiter(o.Config.SendRate, o.Config.SendBurst),
		polls:       newLongPolls(o.Config.LongPollsPerUser),
		fanout:      newLimiter(o.Config.FanoutRate, o.Config.FanoutBurst),
		convChanges: newLimiter(perSecond(o.Config.ConvChangeEvery), o.Config.ConvChangeBurst),
		creations:   newLimiter(perSecond(o.Config.ConvCreateEvery), o.Config.ConvCreateBurst),
		historyLim:  newLimiter(o.Config.HistoryRate, o.Config.HistoryBurst),
		conns:       make(map[*wsConn]struct{}),
		devices:     make(map[deviceKey]*wsConn),
		epoch:       time.Now(),
	}
	if g.fanout != nil {
		g.fanoutTurns = newTurns()
	}
	if g.presence == nil {
		g.presence = nopPresence{}
	}
	g.drainCtx, g.drain = context.WithCancel(context.Background())
	g.upgrader = newUpgrader(g)
	g.routes()
	return g
}

// routes registers every endpoint of docs/protocol.md sections 3 and 5-11.
func (g *Gateway) routes() {
	m := g.mux
	m.Handle("POST /v1/admin/users", g.admin(g.createUser))
	m.Handle("POST /v1/admin/tokens", g.admin(g.issueToken))
	m.Handle("POST /v1/admin/users/{user_id}/revoke", g.admin(g.revokeTokens))

	m.Handle("GET /v1/me", g.client(g.me))
	m.Handle("PATCH /v1/me", g.client(g.patchMe))
	m.Handle("GET /v1/presence", g.client(g.getPresence))
	m.Handle("GET /v1/users/{user_id}", g.client(g.user))

	m.Handle("POST /v1/conversations", g.client(g.createConversation))
	m.Handle("GET /v1/conversations", g.client(g.listConversations))
	m.Handle("GET /v1/unread", g.client(g.unreadTotal))
	m.Handle("GET /v1/conversations/{conv_id}", g.client(g.getConversation))
	m.Handle("PATCH /v1/conversations/{conv_id}", g.client(g.renameConversation))
	m.Handle("DELETE /v1/conversations/{conv_id}", g.client(g.deleteConversation))
	m.Handle("POST /v1/conversations/{conv_id}/members", g.client(g.updateMembers))
	m.Handle("GET /v1/conversations/{conv_id}/members", g.client(g.listMembers))
	m.Handle("GET /v1/conversations/{conv_id}/messages", g.client(g.history))
	m.Handle("POST /v1/conversations/{conv_id}/read", g.client(g.markRead))
	m.Handle("POST /v1/conversations/{conv_id}/delivered", g.client(g.markDelivered))
	m.Handle("GET /v1/conversations/{conv_id}/receipts", g.client(g.receipts))

	m.Handle("POST /v1/messages", g.clientSend(g.send))
	m.Handle("POST /v1/messages/recall", g.client(g.recall))

	m.Handle("GET /v1/sync/snapshot", g.client(g.snapshot))
	m.Handle("GET /v1/sync", g.client(g.sync))
	m.HandleFunc("GET /v1/ws", g.serveWS)

	g.attachmentRoutes()

	m.HandleFunc("GET /healthz", g.healthz)
	m.Handle("GET /metrics", g.timely(g.met.Handler()))
	g.pushRoutes()
	g.webRoutes()
}

// ServeHTTP answers one request: 503 while draining, JSON 404 / 405 for unknown routes and
// methods, and a logged 500 for a panicking handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.log.Error("gateway: panic serving request", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if sw.status == 0 && !sw.hijacked {
				g.writeError(sw, r, errInternal)
			}
		}
		g.met.HTTPRequest(sw.code())
	}()
	g.startDeadlines(w, r)
	if g.draining.Load() && r.URL.Path != "/metrics" {
		g.refuse(sw, r, errDraining)
		return
	}
	if h, pattern := g.mux.Handler(r); pattern == "" {
		g.noRoute(sw, r, h)
		return
	}
	g.mux.ServeHTTP(sw, r)
}

// noRoute answers a request no pattern matched. The mux's own answer (404, or 405 with an
// Allow header) is captured and re-sent as a JSON error.
func (g *Gateway) noRoute(w http.ResponseWriter, r *http.Request, h http.Handler) {
	cw := &captureWriter{header: make(http.Header)}
	h.ServeHTTP(cw, r)
	switch cw.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", cw.header.Get("Allow"))
		g.refuse(w, r, &statusError{http.StatusMethodNotAllowed,
			fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, cw.header.Get("Allow"))})
	default:
		g.refuse(w, r, &statusError{http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	}
}

// Shutdown drains the gateway: new requests and upgrades get 503, waiting long-polls answer
// with no events, and every WebSocket is closed with 1001. It returns when every connection
// has finished, or with ctx's error when ctx ends first (the remaining sockets are then
// closed at once). Call it before, or together with, http.Server.Shutdown: the server does
// not track hijacked connections, and its Shutdown waits for long-polls that only this
// call ends.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.draining.Store(true)
	conns := make([]*wsConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.drain()
	for _, c := range conns {
		c.close(websocket.CloseGoingAway, "server shutting down", nil)
	}
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.Close()
		return ctx.Err()
	}
}

// Close ends every WebSocket at once, without a close frame, and returns when their
// goroutines have: what a drain that ran out of time, or a node stopped without one, does
// before its store closes.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.draining.Store(true)
	for c := range g.conns {
		_ = c.ws.NetConn().Close()
	}
	g.mu.Unlock()
	g.drain()
	g.wg.Wait()
}

// healthz answers 200 while serving and the store works; 503 with the reason when the
// store fails (ServeHTTP also answers 503 once draining). It names the bus's state too
// (chat.Service.BusState): a node whose bus is down still serves, so that is no 503.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	if err := g.svc.Healthy(r.Context()); err != nil {
		g.writeError(w, r, err)
		return
	}
	g.writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
		Bus    string `json:"bus"`
	}{"ok", g.svc.BusState()})
}

// allow applies the device's request limit, and its send limit when send is true.
func (g *Gateway) allow(me chat.Identity, send bool) error {
	now := time.Now()
	key := deviceKeyString(me)
	if ok, d := g.requests.allow(key, now); !ok {
		return &rateLimitError{what: "too many requests from this device", retryAfter: retrySeconds(d)}
	}
	if send {
		if ok, d := g.sends.allow(key, now); !ok {
			return &rateLimitError{what: "too many sends from this device", retryAfter: retrySeconds(d)}
		}
	}
	return nil
}

// weighed runs call under the device's fanout limit, with a context that counts the events
// call creates (chat.WithEventCount), and charges them to the device afterwards. A device
// whose bucket is in debt is refused (429) until it has refilled. Calls that may write
// (writes) run one at a time per device: side by side, they would all be admitted before
// any was charged, and the limit would bound only sequential callers. (A WebSocket
// connection's pipelined sends are the one exception, bounded by maxInFlight: inflight.go.)
func (g *Gateway) weighed(ctx context.Context, me chat.Identity, writes bool, call func(context.Context) error) error {
	key := deviceKeyString(me)
	if writes {
		leave, err := g.fanoutTurns.enter(ctx, key)
		if err != nil {
			return err
		}
		defer leave()
	}
	if err := g.solvent(key); err != nil {
		return err
	}
	ctx = chat.WithEventCount(ctx)
	defer g.charge(ctx, key)
	return call(ctx)
}

// solvent refuses (429) a call of the device key while its events bucket is in debt.
func (g *Gateway) solvent(key string) error {
	if owing, d := g.fanout.owing(key, time.Now()); owing {
		return &rateLimitError{what: "this device's calls created too many events", retryAfter: retrySeconds(d)}
	}
	return nil
}

// charge charges the device key the events counted under ctx (a chat.WithEventCount
// context), even into debt.
func (g *Gateway) charge(ctx context.Context, key string) {
	g.fanout.charge(key, chat.EventsCounted(ctx), time.Now())
}

// deviceKeyString is the key of a device's buckets.
func deviceKeyString(me chat.Identity) string { return me.UserID + "\x00" + me.DeviceID }

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authenticate resolves the caller of a client route. queryToken allows ?token= (only the
// WebSocket upgrade does, for browsers); the header wins when both are present.
func (g *Gateway) authenticate(r *http.Request, queryToken bool) (chat.Session, error) {
	tok, ok := bearerToken(r)
	if !ok && queryToken {
		tok = r.URL.Query().Get("token")
		ok = tok != ""
	}
	if !ok {
		return chat.Session{}, unauthorized("missing bearer token")
	}
	return g.svc.OpenSession(r.Context(), tok)
}

// checkAdmin verifies the operator's secret.
func (g *Gateway) checkAdmin(r *http.Request) error {
	tok, ok := bearerToken(r)
	if !ok || !auth.EqualSecret(tok, g.adminSecret) {
		return unauthorized("admin secret required")
	}
	return nil
}

// statusWriter records the status of a response for metrics and panic recovery. It passes
// Hijack through (the WebSocket upgrade needs it) and remembers that it happened.
type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes a flush through when the underlying writer supports it.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack takes the connection over, for the WebSocket upgrade.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("gateway: response writer cannot hijack")
	}
	c, rw, err := h.Hijack()
	if err != nil {
		return c, rw, err
	}
	s.hijacked = true
	return newCorkConn(c), rw, nil
}

// code is the status to count: 101 for an upgraded connection, 200 if none was written.
func (s *statusWriter) code() int {
	switch {
	case s.hijacked && s.status == 0:
		return http.StatusSwitchingProtocols
	case s.status == 0:
		return http.StatusOK
	}
	return s.status
}

// captureWriter records a response without sending it.
type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return len(b), nil
}
