package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/metrics"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlite"
	"github.com/parleychat/parley/protocol"
)

const testAdminSecret = "test-admin-secret"

// testServer is a whole node on a real socket: SQLite store, chat service, gateway.
type testServer struct {
	t   testing.TB
	URL string
	gw  *Gateway
	svc *chat.Service
}

// newTestServer starts a node on port 0 with cfg changes applied; it is torn down by
// t.Cleanup. It skips the test while chat is still a stub.
func newTestServer(t testing.TB, mods ...func(*Config)) *testServer {
	t.Helper()
	return newTestServerOn(t, func(s store.Store) store.Store { return s }, mods...)
}

// newTestServerOn is newTestServer on the store wrap makes of its SQLite store.
func newTestServerOn(t testing.TB, wrap func(store.Store) store.Store, mods ...func(*Config)) *testServer {
	t.Helper()
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, sqlite.Options{Dir: t.TempDir(), Relaxed: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { sq.Close() })
	st := wrap(sq)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	m := metrics.New()
	svc := chat.New(chat.Options{Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
		Config: chat.DefaultConfig(), Logger: log, Observer: m})
	cfg := DefaultConfig()
	for _, mod := range mods {
		mod(&cfg)
	}
	gw := New(Options{Service: svc, AdminSecret: testAdminSecret, Config: cfg, Logger: log, Metrics: m})
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := gw.Shutdown(ctx); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		srv.Close()
	})
	ts := &testServer{t: t, URL: srv.URL, gw: gw, svc: svc}
	if _, _, err := svc.CreateUser(ctx, "probe", ""); errors.Is(err, chat.ErrUnavailable) && strings.Contains(err.Error(), "not implemented") {
		t.Skip("chat.Service is not implemented yet")
	}
	return ts
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// do sends a request; body is marshalled unless it is a string or []byte.
func (ts *testServer) do(method, path, token string, body any) (int, []byte, http.Header) {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp.StatusCode, out, resp.Header
}

// must sends a request that must answer want, and decodes the body into v (if not nil).
func (ts *testServer) must(want int, method, path, token string, body, v any) {
	ts.t.Helper()
	code, out, _ := ts.do(method, path, token, body)
	if code != want {
		ts.t.Fatalf("%s %s = %d %s, want %d", method, path, code, out, want)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			ts.t.Fatalf("%s %s: decode %s: %v", method, path, out, err)
		}
	}
}

// wantError checks an error answer: status, JSON body with code == status.
func (ts *testServer) wantError(want int, method, path, token string, body any) http.Header {
	ts.t.Helper()
	code, out, h := ts.do(method, path, token, body)
	var eb protocol.ErrorBody
	if code != want || json.Unmarshal(out, &eb) != nil || eb.Code != want || eb.Error == "" {
		ts.t.Fatalf("%s %s = %d %s, want a %d JSON error", method, path, code, out, want)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		ts.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	return h
}

// user creates a user and returns a token for (id, device).
func (ts *testServer) user(id, device string) string {
	ts.t.Helper()
	code, out, _ := ts.do("POST", "/v1/admin/users", testAdminSecret, protocol.CreateUserRequest{UserID: id})
	if code != 201 && code != 200 {
		ts.t.Fatalf("create user %s: %d %s", id, code, out)
	}
	return ts.token(id, device)
}

func (ts *testServer) token(id, device string) string {
	ts.t.Helper()
	var tok protocol.Token
	ts.must(200, "POST", "/v1/admin/tokens", testAdminSecret, protocol.TokenRequest{UserID: id, DeviceID: device}, &tok)
	return tok.Token
}

func (ts *testServer) direct(token, peer string) protocol.ConversationBrief {
	ts.t.Helper()
	var c protocol.ConversationBrief
	ts.must(200, "POST", "/v1/conversations", token, protocol.CreateConversationRequest{Type: "direct", PeerID: peer}, &c)
	return c
}

func (ts *testServer) send(token, convID, clientMsgID string) protocol.MessageAck {
	ts.t.Helper()
	var ack protocol.MessageAck
	ts.must(200, "POST", "/v1/messages", token, map[string]any{
		"conv_id": convID, "client_msg_id": clientMsgID, "content_type": 1, "content": map[string]string{"text": clientMsgID},
	}, &ack)
	return ack
}

// dial opens a WebSocket with the token in the query; query adds more parameters.
func (ts *testServer) dial(token, query string) *wsClient {
	ts.t.Helper()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/ws?token=" + token + query
	ws, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		ts.t.Fatalf("dial: %v (HTTP %d)", err, status)
	}
	ts.t.Cleanup(func() { ws.Close() })
	return &wsClient{t: ts.t, ws: ws}
}

// wsClient reads and writes JSON frames with a deadline.
type wsClient struct {
	t  testing.TB
	ws *websocket.Conn
}

func (c *wsClient) write(frame string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next frame as a map, failing after 5 s.
func (c *wsClient) read() map[string]any {
	c.t.Helper()
	raw := c.readRaw()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("frame %s: %v", raw, err)
	}
	return m
}

func (c *wsClient) readRaw() []byte {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, raw, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return raw
}

// readReply skips pushes until the reply to id.
func (c *wsClient) readReply(id string) map[string]any {
	c.t.Helper()
	for {
		m := c.read()
		if m["op"] == "event" {
			continue
		}
		if m["id"] != id {
			c.t.Fatalf("reply %v, want id %q", m, id)
		}
		return m
	}
}

// readEvent skips replies until the next pushed event.
func (c *wsClient) readEvent() protocol.SyncEvent {
	c.t.Helper()
	for {
		raw := c.readRaw()
		var p protocol.PushFrame
		if err := json.Unmarshal(raw, &p); err != nil {
			c.t.Fatalf("frame %s: %v", raw, err)
		}
		if p.Op == "event" && p.Event != nil {
			return *p.Event
		}
		if p.Op == "error" {
			c.t.Fatalf("error push: %s", raw)
		}
	}
}

// readClose reads until the connection closes and returns the close code.
func (c *wsClient) readClose() int {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, raw, err := c.ws.ReadMessage()
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce):
			return ce.Code
		case err != nil:
			c.t.Fatalf("read: %v, want a close frame", err)
		}
		_ = raw
	}
}

// ---- tests that need no live service ----

func TestRoutes(t *testing.T) {
	ts := newTestServer(t)
	h := ts.wantError(405, "PUT", "/v1/messages", "", nil)
	if !strings.Contains(h.Get("Allow"), "POST") {
		t.Fatalf("405 without Allow: %v", h)
	}
	ts.wantError(404, "GET", "/v1/nothing", "", nil)
	ts.wantError(404, "GET", "/nothing", "", nil) // "/" is the web client (web_test.go)
	ts.must(200, "GET", "/healthz", "", nil, nil)
	// A panicking handler answers 500 and the server carries on.
	ts.gw.mux.HandleFunc("GET /v1/test-panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	ts.wantError(500, "GET", "/v1/test-panic", "", nil)
	ts.must(200, "GET", "/healthz", "", nil, nil)
	code, out, _ := ts.do("GET", "/metrics", "", nil)
	if code != 200 || !bytes.Contains(out, []byte("parley_ws_connections")) || !bytes.Contains(out, []byte("process_resident_memory_bytes")) {
		t.Fatalf("/metrics = %d:\n%.500s", code, out)
	}
}

func TestAuthentication(t *testing.T) {
	ts := newTestServer(t)
	tok := ts.user("alice", "phone")
	h := ts.wantError(401, "GET", "/v1/conversations", "", nil)
	if h.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	ts.wantError(401, "GET", "/v1/conversations", "garbage", nil)
	ts.wantError(401, "GET", "/v1/conversations", testAdminSecret, nil)    // admin secret is no user token
	ts.wantError(401, "POST", "/v1/admin/users", tok, `{"user_id":"bob"}`) // user token is no admin secret
	ts.wantError(401, "POST", "/v1/admin/users", "", `{"user_id":"bob"}`)  // nothing
	ts.wantError(401, "GET", "/v1/conversations?token="+tok, "", nil)      // ?token= only for /v1/ws
	ts.must(200, "GET", "/v1/conversations", tok, nil, nil)

	// A WebSocket with a bad token is refused before the upgrade.
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/ws?token=bad"
	_, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("dial with a bad token: err=%v resp=%v", err, resp)
	}
	// Revocation: old tokens fail, new ones work.
	ts.must(200, "POST", "/v1/admin/users/alice/revoke", testAdminSecret, nil, nil)
	ts.wantError(401, "GET", "/v1/conversations", tok, nil)
	ts.must(200, "GET", "/v1/conversations", ts.token("alice", "phone"), nil, nil)
	ts.wantError(404, "POST", "/v1/admin/users/nobody/revoke", testAdminSecret, nil)
}

func TestAdmin(t *testing.T) {
	ts := newTestServer(t)
	var u protocol.User
	ts.must(201, "POST", "/v1/admin/users", testAdminSecret, `{"user_id":"carol","name":"Carol"}`, &u)
	if u.UserID != "carol" || u.Name != "Carol" {
		t.Fatalf("created %+v", u)
	}
	ts.must(200, "POST", "/v1/admin/users", testAdminSecret, `{"user_id":"carol","name":"Other"}`, &u)
	if u.UserID != "carol" {
		t.Fatalf("existing %+v", u)
	}
	ts.wantError(404, "POST", "/v1/admin/tokens", testAdminSecret, `{"user_id":"nobody","device_id":"d"}`)
	ts.wantError(400, "POST", "/v1/admin/users", testAdminSecret, `{"user_id":"carol"} {}`)
	ts.wantError(400, "POST", "/v1/admin/users", testAdminSecret, `{"user_id":7}`)
	ts.wantError(400, "POST", "/v1/admin/users", testAdminSecret, `[]`)
	ts.wantError(400, "POST", "/v1/admin/users", testAdminSecret, ``)
	ts.wantError(400, "POST", "/v1/admin/users", testAdminSecret, `{"user_id":"with space"}`)
	ts.wantError(413, "POST", "/v1/admin/users", testAdminSecret, `{"name":"`+strings.Repeat("x", 1<<20)+`"}`)
	var tok protocol.Token
	ts.must(200, "POST", "/v1/admin/tokens", testAdminSecret, `{"user_id":"carol","device_id":"d1","ttl_seconds":60,"extra":true}`, &tok)
	if tok.Token == "" || tok.ExpiresAt <= time.Now().UnixMilli() {
		t.Fatalf("token %+v", tok)
	}
}

func TestHTTPMessaging(t *testing.T) {
	ts := newTestServer(t)
	alice, bob := ts.user("alice", "phone"), ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")

	code, out, _ := ts.do("POST", "/v1/messages", alice, map[string]any{"conv_id": c.ConvID, "client_msg_id": "m1", "content_type": 1, "content": "hi"})
	if code != 200 || !bytes.Contains(out, []byte(`"code":0`)) || !bytes.Contains(out, []byte(`"duplicate":false`)) {
		t.Fatalf("send = %d %s", code, out)
	}
	dup := ts.send(alice, c.ConvID, "m1")
	if !dup.Duplicate || dup.Seq != 1 {
		t.Fatalf("duplicate ack %+v", dup)
	}
	ts.send(alice, c.ConvID, "m2")

	var page protocol.MessagesPage
	ts.must(200, "GET", "/v1/conversations/"+c.ConvID+"/messages?after_seq=0&limit=1", bob, nil, &page)
	if len(page.Messages) != 1 || page.Messages[0].Seq != 1 || !page.HasMore {
		t.Fatalf("page %+v", page)
	}
	ts.must(200, "GET", "/v1/conversations/"+c.ConvID+"/messages?before_seq=3", bob, nil, &page)
	if len(page.Messages) != 2 || page.Messages[0].Seq != 1 {
		t.Fatalf("page before 3: %+v", page)
	}
	code, out, _ = ts.do("GET", "/v1/conversations/"+c.ConvID+"/messages?limit=1", bob, nil)
	if code != 200 || bytes.Contains(out, []byte("anchor_seq")) || bytes.Contains(out, []byte("has_more_")) {
		t.Fatalf("a plain page carries a jump's fields: %d %s", code, out)
	}
	ts.must(200, "GET", "/v1/conversations/"+c.ConvID+"/messages?around_ts=1&limit=1", bob, nil, &page)
	if len(page.Messages) != 1 || page.AnchorSeq != 1 || page.HasMoreBefore || !page.HasMoreAfter {
		t.Fatalf("page around the start: %+v", page)
	}
	for _, q := range []string{"around_ts=0", "around_ts=-5", "around_ts=soon", "around_ts=1&after_seq=1", "around_ts=1&before_seq=2"} {
		ts.wantError(400, "GET", "/v1/conversations/"+c.ConvID+"/messages?"+q, bob, nil)
	}
	ts.wantError(400, "GET", "/v1/conversations/"+c.ConvID+"/messages?limit=ten", bob, nil)
	ts.wantError(400, "GET", "/v1/conversations/"+c.ConvID+"/messages?after_seq=-1", bob, nil)
	ts.wantError(400, "GET", "/v1/conversations/bad.id/messages", bob, nil)

	var rp protocol.ReadPosition
	ts.must(200, "POST", "/v1/conversations/"+c.ConvID+"/read", bob, `{"seq":1}`, &rp)
	if rp.ReadSeq != 1 {
		t.Fatalf("read %+v", rp)
	}
	ts.wantError(400, "POST", "/v1/conversations/"+c.ConvID+"/read", bob, `{"seq":-1}`)
	ts.wantError(400, "POST", "/v1/conversations/"+c.ConvID+"/read", bob, `{}`)
	var dp protocol.DeliveredPosition
	ts.must(200, "POST", "/v1/conversations/"+c.ConvID+"/delivered", bob, `{"seq":2}`, &dp)
	if dp.DeliveredSeq != 2 {
		t.Fatalf("delivered %+v", dp)
	}
	var rc protocol.Receipts
	ts.must(200, "GET", "/v1/conversations/"+c.ConvID+"/receipts?seq=1", alice, nil, &rc)
	if rc.ReadCount != 1 || rc.MemberCount != 1 {
		t.Fatalf("receipts %+v", rc)
	}
	ts.wantError(404, "GET", "/v1/conversations/"+c.ConvID+"/receipts?seq=0", alice, nil)
	ts.wantError(400, "GET", "/v1/conversations/"+c.ConvID+"/receipts", alice, nil)

	ts.wantError(403, "POST", "/v1/messages/recall", bob, map[string]any{"conv_id": c.ConvID, "seq": 1})
	ts.must(200, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": c.ConvID, "seq": 1}, nil)

	var list protocol.ConversationList
	ts.must(200, "GET", "/v1/conversations", bob, nil, &list)
	if len(list.Conversations) != 1 {
		t.Fatalf("list %+v", list)
	}
	ts.must(200, "DELETE", "/v1/conversations/"+c.ConvID, bob, nil, nil)
	ts.must(200, "GET", "/v1/conversations/"+c.ConvID, bob, nil, nil)

	var g protocol.ConversationBrief
	ts.must(200, "POST", "/v1/conversations", alice, `{"type":"group","name":"g","members":["bob"]}`, &g)
	ts.must(200, "PATCH", "/v1/conversations/"+g.ConvID, alice, `{"name":"renamed"}`, &g)
	if g.Name != "renamed" {
		t.Fatalf("rename: %+v", g)
	}
	ts.wantError(403, "PATCH", "/v1/conversations/"+g.ConvID, bob, `{"name":"mine"}`)
	ts.must(200, "POST", "/v1/conversations/"+g.ConvID+"/members", bob, `{"remove":["bob"]}`, nil)
	ts.wantError(404, "GET", "/v1/conversations/"+g.ConvID, bob, nil)
}

func TestHTTPSync(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user("alice", "phone")
	ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	var snap protocol.SyncSnapshot
	ts.must(200, "GET", "/v1/sync/snapshot?recent=0", alice, nil, &snap)
	ts.wantError(400, "GET", "/v1/sync/snapshot?recent=x", alice, nil)
	ts.wantError(400, "GET", "/v1/sync?cursor=abc", alice, nil)
	ts.wantError(400, "GET", "/v1/sync?cursor=0&wait=1.5", alice, nil)
	ts.wantError(409, "GET", fmt.Sprintf("/v1/sync?cursor=%d", snap.Cursor+100), alice, nil)

	// A long-poll returns as soon as an event commits.
	done := make(chan protocol.SyncResponse, 1)
	go func() {
		var resp protocol.SyncResponse
		ts.must(200, "GET", fmt.Sprintf("/v1/sync?cursor=%d&wait=10", snap.Cursor), alice, nil, &resp)
		done <- resp
	}()
	time.Sleep(50 * time.Millisecond) // not synchronisation: the test passes either way
	ts.send(alice, c.ConvID, "m1")
	select {
	case resp := <-done:
		if len(resp.Events) == 0 || resp.Events[0].Cursor != snap.Cursor+1 {
			t.Fatalf("long-poll %+v", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not return after a commit")
	}
}

func TestShutdownAnswersLongPolls(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user("alice", "phone")
	var resp protocol.SyncResponse
	ts.must(200, "GET", "/v1/sync?cursor=0", alice, nil, &resp)
	ws := ts.dial(alice, "")
	ws.write(`{"id":"p","op":"ping"}`)
	ws.readReply("p")

	done := make(chan int, 1)
	go func() {
		code, _, _ := ts.do("GET", fmt.Sprintf("/v1/sync?cursor=%d&wait=30", resp.Cursor), alice, nil)
		done <- code
	}()
	waitFor(t, func() bool { return testutilGauge(ts, "parley_longpolls_waiting") == 1 })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.gw.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if code := ws.readClose(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("long-poll answered %d at shutdown", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll still waiting after shutdown")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	ts.wantError(503, "GET", "/healthz", "", nil)
}

func TestRateLimits(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.SendRate, c.SendBurst = 0.1, 1 })
	alice := ts.user("alice", "phone")
	ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	ts.send(alice, c.ConvID, "m1")
	h := ts.wantError(429, "POST", "/v1/messages", alice, map[string]any{"conv_id": c.ConvID, "client_msg_id": "m2", "content_type": 1, "content": 1})
	if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	ts.must(200, "GET", "/v1/conversations", alice, nil, nil) // other requests are not sends
	ws := ts.dial(alice, "")
	ws.write(fmt.Sprintf(`{"id":"s","op":"send","conv_id":%q,"client_msg_id":"m3","content_type":1,"content":1}`, c.ConvID))
	r := ws.readReply("s")
	if r["code"] != 429.0 || r["retry_after"] == nil {
		t.Fatalf("ws rate limit reply %v", r)
	}
}

// ---- WebSocket ----

func TestWSOps(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user("alice", "phone")
	ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	ws := ts.dial(alice, "")

	ws.write(`{"id":"p1","op":"ping"}`)
	if got := string(ws.readRaw()); got != `{"id":"p1","code":0,"op":"pong"}` {
		t.Fatalf("pong %s", got)
	}
	ws.write(`not json`)
	if got := ws.read(); got["id"] != "" || got["code"] != 400.0 || got["error"] == "" {
		t.Fatalf("bad frame reply %v", got)
	}
	ws.write(`{"id":"u","op":"dance"}`)
	if got := ws.read(); got["id"] != "u" || got["code"] != 400.0 {
		t.Fatalf("unknown op reply %v", got)
	}
	ws.write(fmt.Sprintf(`{"id":"s1","op":"send","conv_id":%q,"client_msg_id":"w1","content_type":1,"content":{"t":"x"}}`, c.ConvID))
	// The ack and the push of the sender's own message event come in either order.
	var ack, push map[string]any
	for ack == nil || push == nil {
		m := ws.read()
		if m["op"] == "event" {
			push = m
		} else {
			ack = m
		}
	}
	if ack["id"] != "s1" || ack["code"] != 0.0 || ack["seq"] != 1.0 || ack["duplicate"] != false || ack["msg_id"] == "" {
		t.Fatalf("send ack %v", ack)
	}
	if ev := push["event"].(map[string]any); ev["type"] != protocol.EventMessage || ev["conv_id"] != c.ConvID {
		t.Fatalf("event %v", ev)
	}
	ws.write(fmt.Sprintf(`{"id":"r1","op":"read","conv_id":%q,"seq":1}`, c.ConvID))
	if r := ws.readReply("r1"); r["code"] != 0.0 || r["read_seq"] != 1.0 {
		t.Fatalf("read reply %v", r)
	}
	ws.write(fmt.Sprintf(`{"id":"d1","op":"delivered","conv_id":%q,"seq":-1}`, c.ConvID))
	if r := ws.readReply("d1"); r["code"] != 400.0 {
		t.Fatalf("bad delivered reply %v", r)
	}
	ws.write(`{"id":"y1","op":"sync","cursor":0,"limit":1}`)
	if r := ws.readReply("y1"); r["code"] != 0.0 || r["has_more"] != true || len(r["events"].([]any)) != 1 {
		t.Fatalf("sync reply %v", r)
	}
	ws.write(fmt.Sprintf(`{"id":"x1","op":"recall","conv_id":%q,"seq":1}`, c.ConvID))
	if r := ws.readReply("x1"); r["code"] != 0.0 || len(r) != 2 {
		t.Fatalf("recall reply %v", r)
	}
	// Over 1 MiB closes the connection.
	ws.write(`{"id":"big","op":"ping","pad":"` + strings.Repeat("x", protocol.MaxFrameBytes) + `"}`)
	if code := ws.readClose(); code != websocket.CloseMessageTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
}

func TestWSCatchUpIsGapless(t *testing.T) {
	ts := newTestServer(t)
	alice, bob := ts.user("alice", "phone"), ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	const before, during = 30, 30
	for i := range before {
		ts.send(alice, c.ConvID, fmt.Sprintf("a%d", i))
	}
	// Send more while the connection catches up: every cursor must arrive once, in order.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range during {
			ts.send(alice, c.ConvID, fmt.Sprintf("b%d", i))
		}
	}()
	ws := ts.dial(bob, "&cursor=0")
	var last int64
	for last < before+during+1 { // bob's log: conv_updated + one message event per send
		ev := ws.readEvent()
		if ev.Cursor != last+1 {
			t.Fatalf("pushed cursor %d after %d", ev.Cursor, last)
		}
		last = ev.Cursor
	}
	<-sent
}

func TestWSCursorErrors(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user("alice", "phone")
	ws := ts.dial(alice, "&cursor=1000")
	raw := ws.readRaw()
	var p protocol.PushFrame
	if err := json.Unmarshal(raw, &p); err != nil || p.Op != "error" || p.Code != 409 || p.Error == "" {
		t.Fatalf("push %s", raw)
	}
	ws.readClose()
	ts.wantError(400, "GET", "/v1/ws?cursor=x&token="+alice, "", nil)
}

func TestWSReplacedAndRevoked(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user("alice", "phone")
	first := ts.dial(alice, "")
	second := ts.dial(alice, "")
	if code := first.readClose(); code != CloseReplaced {
		t.Fatalf("replaced connection closed with %d", code)
	}
	other := ts.dial(ts.token("alice", "tablet"), "") // another device is not replaced
	second.write(`{"id":"p","op":"ping"}`)
	second.readReply("p")

	ts.must(200, "POST", "/v1/admin/users/alice/revoke", testAdminSecret, nil, nil)
	for _, c := range []*wsClient{second, other} {
		if code := c.readClose(); code != CloseRevoked {
			t.Fatalf("revoked connection closed with %d", code)
		}
	}
	fresh := ts.dial(ts.token("alice", "phone"), "")
	fresh.write(`{"id":"p","op":"ping"}`)
	fresh.readReply("p")
}

func TestWSSlowConsumerIsClosed(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.SendQueue, c.WriteTimeout, c.SendRate, c.RequestRate = 1, 500*time.Millisecond, 0, 0
	})
	alice, bob := ts.user("alice", "phone"), ts.user("bob", "laptop")
	c := ts.direct(alice, "bob")
	ts.dial(bob, "") // bob never reads
	// Once the socket buffers are full, bob's writes stall and his hub subscription
	// overflows: the server closes him, and alice's sends never wait for him.
	content := strings.Repeat("x", 60<<10)
	for i := 0; testutilGauge(ts, "parley_ws_connections") != 0; i++ {
		if i == 1000 {
			t.Fatal("a connection that never reads is still open")
		}
		ts.must(200, "POST", "/v1/messages", alice, map[string]any{
			"conv_id": c.ConvID, "client_msg_id": fmt.Sprintf("m%d", i), "content_type": 1, "content": content}, nil)
	}
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testutilGauge reads a gauge from /metrics.
func testutilGauge(ts *testServer, name string) float64 {
	mfs, err := ts.gw.met.Registry().Gather()
	if err != nil {
		ts.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
