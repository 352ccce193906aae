package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// deadline bounds every wait of this package: a reply, a push, a close, a long-poll.
const deadline = 10 * time.Second

// Exact key sets of the wire objects of docs/protocol.md.
var (
	briefKeys       = []string{"conv_id", "type", "name", "owner_id", "members_count", "fanout", "max_seq", "read_seq", "delivered_seq", "cleared_seq", "unread", "last_message", "updated_at", "retention_seconds"}
	directBriefKeys = append(slices.Clone(briefKeys), "peer_read_seq", "peer_delivered_seq")
	messageKeys     = []string{"conv_id", "seq", "msg_id", "client_msg_id", "sender_id", "content_type", "content", "extra", "created_at", "recalled"}
	ackKeys         = []string{"code", "conv_id", "client_msg_id", "msg_id", "seq", "created_at", "duplicate"}
	eventKeys       = []string{"cursor", "type", "conv_id", "ts", "data"}
	errorKeys       = []string{"code", "error"}
)

// node is a running Parley node seen from outside.
type node struct {
	*parleytest.Server
}

// start runs a node for the test; configure may change its configuration first.
func start(t *testing.T, configure ...func(*server.Config)) *node {
	t.Helper()
	return &node{parleytest.Start(t, configure...)}
}

// clock is a node's time source that tests can move forward (token expiry, recall window,
// event retention). It is safe for concurrent use.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// withClock makes the node read time from c.
func withClock(c *clock) func(*server.Config) {
	return func(cfg *server.Config) { cfg.Now = c.now }
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	raw    []byte
}

// request sends one HTTP request. body may be nil, a string or []byte (sent as is), or
// anything else (JSON-encoded). It does not touch t, so goroutines may call it.
func (n *node) request(method, path, token string, body any) (response, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, n.URL+path, r)
	if err != nil {
		return response{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, raw: raw}, nil
}

// call is request that fails the test on a transport error.
func (n *node) call(t testing.TB, method, path, token string, body any) response {
	t.Helper()
	r, err := n.request(method, path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expect sends a request that must answer status want with a JSON object, and returns it.
func (n *node) expect(t testing.TB, want int, method, path, token string, body any) map[string]any {
	t.Helper()
	r := n.call(t, method, path, token, body)
	if r.status != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, r.status, r.raw, want)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return object(t, r.raw)
}

// ok sends a request that must answer 200.
func (n *node) ok(t testing.TB, method, path, token string, body any) map[string]any {
	t.Helper()
	return n.expect(t, http.StatusOK, method, path, token, body)
}

// fail sends a request that must answer the error want with the body {"code","error"},
// code equal to the status. It returns the response for header checks.
func (n *node) fail(t testing.TB, want int, method, path, token string, body any) response {
	t.Helper()
	r := n.call(t, method, path, token, body)
	checkErrorBody(t, fmt.Sprintf("%s %s", method, path), r, want)
	return r
}

// checkErrorBody checks an HTTP error answer against PROTOCOL section 4.
func checkErrorBody(t testing.TB, what string, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s = %d %s, want %d", what, r.status, r.raw, want)
	}
	var m map[string]any
	if err := json.Unmarshal(r.raw, &m); err != nil {
		t.Fatalf("%s: error body %q is not a JSON object: %v", what, r.raw, err)
	}
	wantKeys(t, what+" error body", m, errorKeys...)
	if num(m["code"]) != int64(want) {
		t.Fatalf("%s: error body code %v, want %d (the HTTP status)", what, m["code"], want)
	}
	if s, _ := m["error"].(string); s == "" {
		t.Fatalf("%s: error body has no reason: %s", what, r.raw)
	}
}

// ---- JSON helpers ----

func object(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", raw, err)
	}
	return m
}

// obj returns v as a JSON object, failing the test otherwise.
func obj(t testing.TB, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is not a JSON object", show(v))
	}
	return m
}

// arr returns v as a JSON array of objects, failing the test otherwise.
func arr(t testing.TB, v any) []map[string]any {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is not a JSON array", show(v))
	}
	out := make([]map[string]any, len(a))
	for i, e := range a {
		out[i] = obj(t, e)
	}
	return out
}

// num returns a JSON number as int64, or math.MinInt64 when v is not a number (so that a
// comparison fails and the message shows the value).
func num(v any) int64 {
	f, ok := v.(float64)
	if !ok {
		return -1 << 63
	}
	return int64(f)
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// wantKeys checks that m has exactly the given keys.
func wantKeys(t testing.TB, what string, m map[string]any, keys ...string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(m))
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys %v, want exactly %v\n%s", what, got, want, show(m))
	}
}

// wantFields checks that each field of want has that value in m (numbers as int64).
func wantFields(t testing.TB, what string, m map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := m[k]
		if !ok {
			t.Fatalf("%s: no field %q in %s", what, k, show(m))
		}
		switch w := w.(type) {
		case int:
			if num(g) != int64(w) {
				t.Fatalf("%s: %s = %s, want %d\n%s", what, k, show(g), w, show(m))
			}
		case int64:
			if num(g) != w {
				t.Fatalf("%s: %s = %s, want %d\n%s", what, k, show(g), w, show(m))
			}
		default:
			if show(g) != show(w) {
				t.Fatalf("%s: %s = %s, want %s\n%s", what, k, show(g), show(w), show(m))
			}
		}
	}
}

// checkBrief checks the key set of a ConversationBrief: peer positions only for direct.
func checkBrief(t testing.TB, what string, b map[string]any) {
	t.Helper()
	switch {
	case b["type"] == "direct":
		wantKeys(t, what, b, directBriefKeys...)
	case b["fanout"] == "read": // the approximate online count of its members
		wantKeys(t, what, b, append(slices.Clone(briefKeys), "online_count")...)
	default:
		wantKeys(t, what, b, briefKeys...)
	}
	if lm := b["last_message"]; lm != nil {
		wantKeys(t, what+" last_message", obj(t, lm), messageKeys...)
	}
}

// seqs returns the seq of each message.
func seqs(ms []map[string]any) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = num(m["seq"])
	}
	return out
}

// types returns the type of each event.
func types(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = e["type"].(string)
	}
	return out
}

// ---- domain helpers ----

// user creates a user and returns a token for device "d1".
func (n *node) user(t testing.TB, id string) string {
	t.Helper()
	return n.User(t, id)
}

func (n *node) direct(t testing.TB, token, peer string) map[string]any {
	t.Helper()
	return n.ok(t, "POST", "/v1/conversations", token, map[string]any{"type": "direct", "peer_id": peer})
}

func (n *node) group(t testing.TB, token, name string, readDetail bool, members ...string) map[string]any {
	t.Helper()
	return n.ok(t, "POST", "/v1/conversations", token, map[string]any{"type": "group", "name": name, "members": members, "read_detail": readDetail})
}

// send posts a text message whose content is {"text": clientMsgID} and returns the ack.
func (n *node) send(t testing.TB, token, convID, clientMsgID string) map[string]any {
	t.Helper()
	return n.ok(t, "POST", "/v1/messages", token, textMessage(convID, clientMsgID))
}

func textMessage(convID, clientMsgID string) map[string]any {
	return map[string]any{"conv_id": convID, "client_msg_id": clientMsgID, "content_type": 1, "content": map[string]any{"text": clientMsgID}}
}

func (n *node) brief(t testing.TB, token, convID string) map[string]any {
	t.Helper()
	return n.ok(t, "GET", "/v1/conversations/"+convID, token, nil)
}

// listed returns the caller's conversation list.
func (n *node) listed(t testing.TB, token string) []map[string]any {
	t.Helper()
	return arr(t, n.ok(t, "GET", "/v1/conversations", token, nil)["conversations"])
}

// find returns the brief of convID in list, or nil.
func find(list []map[string]any, convID string) map[string]any {
	for _, b := range list {
		if b["conv_id"] == convID {
			return b
		}
	}
	return nil
}

// history returns the caller's visible messages of convID after afterSeq.
func (n *node) history(t testing.TB, token, convID string, afterSeq int64) []map[string]any {
	t.Helper()
	page := n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/messages?after_seq=%d&limit=200", convID, afterSeq), token, nil)
	return arr(t, page["messages"])
}

// events returns every event of the caller's log after cursor, paging through has_more.
func (n *node) events(t testing.TB, token string, cursor int64) []map[string]any {
	t.Helper()
	var out []map[string]any
	for {
		resp := n.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d&limit=1000", cursor), token, nil)
		evs := arr(t, resp["events"])
		out = append(out, evs...)
		if len(evs) > 0 {
			cursor = num(evs[len(evs)-1]["cursor"])
		}
		if resp["has_more"] != true {
			return out
		}
	}
}

// latest returns the caller's latest cursor (a snapshot with no messages).
func (n *node) latest(t testing.TB, token string) int64 {
	t.Helper()
	return num(n.ok(t, "GET", "/v1/sync/snapshot?recent=0", token, nil)["cursor"])
}

// metric reads one unlabelled sample from GET /metrics, -1 if absent.
func (n *node) metric(t testing.TB, name string) float64 {
	t.Helper()
	r := n.call(t, "GET", "/metrics", "", nil)
	sc := bufio.NewScanner(bytes.NewReader(r.raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

// eventually polls an observable condition of the node (a metric, say) until it holds,
// failing after the deadline. It is used only where the protocol offers no event to wait
// on, never to let time pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ---- WebSocket client ----

// wsClient is one WebSocket connection with a reader goroutine that sorts incoming frames
// into replies (frames with an "id") and pushes (frames without one).
type wsClient struct {
	t       testing.TB
	conn    *websocket.Conn
	replies chan map[string]any
	pushes  chan map[string]any
	done    chan struct{} // closed when the reader ends; err then says why
	quit    chan struct{} // closed at cleanup: the reader stops waiting to hand over frames
	err     error
	nextID  int

	writeMu sync.Mutex // guards conn writes: tests write from one goroutine, but stay safe
}

// wsURL returns the WebSocket URL with the query parameters.
func (n *node) wsURL(query url.Values) string {
	if len(query) == 0 {
		return n.WSURL
	}
	return n.WSURL + "?" + query.Encode()
}

// dialRaw opens a WebSocket with token in the Authorization header (when not empty) and
// the query parameters. It returns gorilla's results as they are.
func (n *node) dialRaw(token string, query url.Values) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	d := websocket.Dialer{HandshakeTimeout: deadline}
	return d.Dial(n.wsURL(query), h)
}

// dial opens a WebSocket and starts reading it. cursor < 0 means no ?cursor.
func (n *node) dial(t testing.TB, token string, cursor int64) *wsClient {
	t.Helper()
	q := url.Values{}
	if cursor >= 0 {
		q.Set("cursor", strconv.FormatInt(cursor, 10))
	}
	return n.dialQuery(t, token, q)
}

// dialQuery opens a WebSocket with the query parameters and starts reading it.
func (n *node) dialQuery(t testing.TB, token string, q url.Values) *wsClient {
	t.Helper()
	conn, resp, err := n.dialRaw(token, q)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial: %v (HTTP %d)", err, status)
	}
	return newWSClient(t, conn)
}

// newWSClient starts the reader of conn; the test's cleanup closes it.
func newWSClient(t testing.TB, conn *websocket.Conn) *wsClient {
	c := &wsClient{
		t:       t,
		conn:    conn,
		replies: make(chan map[string]any, 1024),
		pushes:  make(chan map[string]any, 1<<14),
		done:    make(chan struct{}),
		quit:    make(chan struct{}),
	}
	go c.read()
	t.Cleanup(func() {
		close(c.quit)
		conn.Close()
		<-c.done
	})
	return c
}

func (c *wsClient) read() {
	defer close(c.done)
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			c.err = err
			return
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			c.err = fmt.Errorf("server sent a frame that is not a JSON object: %q", data)
			return
		}
		ch := c.pushes
		if _, ok := m["id"]; ok {
			ch = c.replies
		}
		select {
		case ch <- m:
		case <-c.quit:
			return
		}
	}
}

// write sends one text frame: a string as is, anything else JSON-encoded.
func (c *wsClient) write(frame any) {
	c.t.Helper()
	data, ok := frame.(string)
	if !ok {
		b, err := json.Marshal(frame)
		if err != nil {
			c.t.Fatal(err)
		}
		data = string(b)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(deadline))
	if err := c.conn.WriteMessage(websocket.TextMessage, []byte(data)); err != nil {
		c.t.Fatalf("websocket write: %v", err)
	}
}

// reply waits for the next reply frame.
func (c *wsClient) reply() map[string]any {
	c.t.Helper()
	select {
	case m := <-c.replies:
		return m
	case <-c.done:
		select {
		case m := <-c.replies:
			return m
		default:
		}
		c.t.Fatalf("connection ended while waiting for a reply: %v", c.err)
	case <-time.After(deadline):
		c.t.Fatal("no reply within the deadline")
	}
	return nil
}

// do sends op with params (flat beside id and op) and returns the reply, which must carry
// the same id.
func (c *wsClient) do(op string, params map[string]any) map[string]any {
	c.t.Helper()
	c.nextID++
	id := fmt.Sprintf("r%d", c.nextID)
	frame := map[string]any{"id": id, "op": op}
	maps.Copy(frame, params)
	c.write(frame)
	r := c.reply()
	if r["id"] != id {
		c.t.Fatalf("reply %s, want id %q", show(r), id)
	}
	return r
}

// tryDo is do for other goroutines than the test's: it reports failures as errors. Only
// one goroutine may use a connection's replies at a time.
func (c *wsClient) tryDo(op string, params map[string]any) (map[string]any, error) {
	id := fmt.Sprintf("t-%s-%d", op, time.Now().UnixNano())
	frame := map[string]any{"id": id, "op": op}
	maps.Copy(frame, params)
	b, err := json.Marshal(frame)
	if err != nil {
		return nil, err
	}
	c.writeMu.Lock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(deadline))
	err = c.conn.WriteMessage(websocket.TextMessage, b)
	c.writeMu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case r := <-c.replies:
		if r["id"] != id {
			return nil, fmt.Errorf("reply %s, want id %q", show(r), id)
		}
		delete(r, "id")
		return r, nil
	case <-c.done:
		return nil, fmt.Errorf("connection ended: %v", c.err)
	case <-time.After(deadline):
		return nil, errors.New("no reply within the deadline")
	}
}

// decode parses a JSON object without a testing.TB.
func decode(raw []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %q: %w", raw, err)
	}
	return m, nil
}

// ping checks that the connection still serves frames.
func (c *wsClient) ping() {
	c.t.Helper()
	r := c.do("ping", nil)
	wantKeys(c.t, "pong", r, "id", "code", "op")
	wantFields(c.t, "pong", r, map[string]any{"code": 0, "op": "pong"})
}

// push waits for the next push frame (event or error).
func (c *wsClient) push() map[string]any {
	c.t.Helper()
	select {
	case m := <-c.pushes:
		return m
	case <-c.done:
		select {
		case m := <-c.pushes:
			return m
		default:
		}
		c.t.Fatalf("connection ended while waiting for a push: %v", c.err)
	case <-time.After(deadline):
		c.t.Fatal("no push within the deadline")
	}
	return nil
}

// event waits for the next pushed event and returns the SyncEvent.
func (c *wsClient) event() map[string]any {
	c.t.Helper()
	p := c.push()
	if p["op"] != "event" {
		c.t.Fatalf("push %s, want an event", show(p))
	}
	wantKeys(c.t, "event push", p, "op", "event")
	ev := obj(c.t, p["event"])
	wantKeys(c.t, "pushed SyncEvent", ev, eventKeys...)
	return ev
}

// wantClosed waits for the connection, what, to end with the close code want.
func (c *wsClient) wantClosed(what string, want int) {
	c.t.Helper()
	if code := c.closed(); code != want {
		c.t.Fatalf("%s closed with %d, want %d", what, code, want)
	}
}

// closed waits for the connection to end and returns the close code the server sent, or
// -1 when it ended without a close frame (gorilla reports that as 1006).
func (c *wsClient) closed() int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(deadline):
		c.t.Fatal("connection still open after the deadline")
	}
	var ce *websocket.CloseError
	if errors.As(c.err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
		return ce.Code
	}
	return -1
}

// cluster reports whether the tests run on several nodes (parleytest.EnvNodes), where a
// few pushes may be skipped and filled by history, as the protocol allows.
func cluster() bool {
	n, _ := strconv.Atoi(os.Getenv(parleytest.EnvNodes))
	return n >= 2
}
