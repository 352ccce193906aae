package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/protocol"
)

// fakeServer implements the slice of PROTOCOL the SDK's session and Send rely on: snapshot,
// sync, send over HTTP and WebSocket, delivered, and a WebSocket whose pushes each test
// scripts through the fakeConn it receives on conns. Its state is inspected under mu.
type fakeServer struct {
	srv      *httptest.Server
	token    string
	upgrader websocket.Upgrader

	conns     chan *fakeConn     // every accepted WebSocket, for the test to drive
	delivered chan deliveredNote // every delivered report, HTTP or WebSocket

	mu             sync.Mutex // guards the fields below
	log            []SyncEvent
	snapshotCursor int64
	snapshots      int
	syncPageMax    int     // caps a sync page when > 0
	syncCursors    []int64 // the cursor of each GET /v1/sync
	syncStatus     int     // when non-zero, GET /v1/sync fails with this status
	wsCount        int
	refuseWS       int // when non-zero, WebSocket upgrades are refused with this status
	onSend         func(attempt int) sendAction
	sends          []sendAttempt
	acks           map[string]MessageAck
	open           []*fakeConn

	// Read fanout (section 10): the snapshot's briefs and mark, each conversation's
	// messages served by history, and what the client asked.
	snapshotConvs []ConversationBrief
	snapshotMark  int64
	syncMarks     []string                     // the mark= of each GET /v1/sync ("" when absent)
	briefs        map[string]ConversationBrief // what an open answers
	history       map[string][]Message         // conv_id -> messages, seq = index + 1
	historyAfter  []int64                      // the after_seq of each history request
	historyPage   int                          // caps a history page when > 0
	historyFail   []int                        // statuses the next history requests answer, in turn
}

type sendAction struct {
	status int  // non-zero: answer this error code
	drop   bool // drop the connection without answering
}

type sendAttempt struct {
	via string // "ws" or "http"
	req protocol.SendRequest
}

type deliveredNote struct {
	conv string
	seq  int64
}

func newFake(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{
		token:     "tok-alice",
		conns:     make(chan *fakeConn, 16),
		delivered: make(chan deliveredNote, 256),
		acks:      make(map[string]MessageAck),
		briefs:    make(map[string]ConversationBrief),
		history:   make(map[string][]Message),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sync/snapshot", f.auth(f.handleSnapshot))
	mux.HandleFunc("GET /v1/sync", f.auth(f.handleSync))
	mux.HandleFunc("POST /v1/messages", f.auth(f.handleSendHTTP))
	mux.HandleFunc("POST /v1/conversations/{id}/delivered", f.auth(f.handleDeliveredHTTP))
	mux.HandleFunc("GET /v1/conversations/{id}/messages", f.auth(f.handleHistory))
	mux.HandleFunc("GET /v1/ws", f.handleWS)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.mu.Lock()
		for _, fc := range f.open {
			fc.ws.Close()
		}
		f.mu.Unlock()
		f.srv.Close()
	})
	return f
}

// client returns a Client of this server with test-speed backoff, closed at cleanup.
func (f *fakeServer) client(t *testing.T, opts Options) *Client {
	t.Helper()
	opts.BaseURL = f.srv.URL
	opts.Token = f.token
	opts.Backoff = Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	c := New(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (f *fakeServer) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			writeErr(w, http.StatusUnauthorized, "bad token")
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	writeJSON(w, code, protocol.ErrorBody{Code: code, Error: msg})
}

func (f *fakeServer) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.snapshots++
	snap := SyncSnapshot{Cursor: f.snapshotCursor, Mark: f.snapshotMark, Conversations: append([]ConversationBrief{}, f.snapshotConvs...)}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, snap)
}

func (f *fakeServer) handleSync(w http.ResponseWriter, r *http.Request) {
	cursor, err := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "bad cursor")
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = protocol.DefaultSyncLimit
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncCursors = append(f.syncCursors, cursor)
	f.syncMarks = append(f.syncMarks, r.URL.Query().Get("mark"))
	if f.syncStatus != 0 {
		writeErr(w, f.syncStatus, "scripted")
		return
	}
	if cursor > int64(len(f.log)) {
		writeErr(w, http.StatusConflict, "cursor ahead")
		return
	}
	if f.syncPageMax > 0 {
		limit = min(limit, f.syncPageMax)
	}
	evs := f.log[cursor:]
	resp := SyncResponse{Cursor: cursor, Events: evs[:min(limit, len(evs))], HasMore: len(evs) > limit}
	if n := len(resp.Events); n > 0 {
		resp.Cursor = resp.Events[n-1].Cursor
	}
	writeJSON(w, http.StatusOK, resp)
}

// send applies the test's script to one send attempt and, on success, acks it the way the
// server does: once per client_msg_id, repeats flagged duplicate.
func (f *fakeServer) send(via string, req protocol.SendRequest) (sendAction, MessageAck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sends = append(f.sends, sendAttempt{via: via, req: req})
	var act sendAction
	if f.onSend != nil {
		act = f.onSend(len(f.sends))
	}
	if act.status != 0 || act.drop {
		return act, MessageAck{}
	}
	if ack, ok := f.acks[req.ClientMsgID]; ok {
		ack.Duplicate = true
		return act, ack
	}
	ack := MessageAck{
		ConvID: req.ConvID, ClientMsgID: req.ClientMsgID, Seq: int64(len(f.acks) + 1),
		MsgID: fmt.Sprintf("m%d", len(f.acks)+1), CreatedAt: 1,
	}
	f.acks[req.ClientMsgID] = ack
	return act, ack
}

func (f *fakeServer) handleSendHTTP(w http.ResponseWriter, r *http.Request) {
	var req protocol.SendRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	act, ack := f.send("http", req)
	switch {
	case act.drop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	case act.status != 0:
		writeErr(w, act.status, "scripted")
	default:
		writeJSON(w, http.StatusOK, ack)
	}
}

func (f *fakeServer) handleDeliveredHTTP(w http.ResponseWriter, r *http.Request) {
	var req protocol.PositionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Seq == nil {
		writeErr(w, http.StatusBadRequest, "bad body")
		return
	}
	f.delivered <- deliveredNote{conv: r.PathValue("id"), seq: *req.Seq}
	writeJSON(w, http.StatusOK, protocol.DeliveredPosition{DeliveredSeq: *req.Seq})
}

func (f *fakeServer) handleWS(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	refuse := f.refuseWS
	f.mu.Unlock()
	if refuse != 0 {
		writeErr(w, refuse, "refused")
		return
	}
	fc := &fakeConn{
		f:      f,
		auth:   r.Header.Get("Authorization"),
		qtoken: r.URL.Query().Get("token"),
		frames: make(chan map[string]any, 64),
	}
	fc.cursor, fc.cursorErr = strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64)
	fc.mark = r.URL.Query().Get("mark")
	ws, err := f.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	fc.ws = ws
	f.mu.Lock()
	f.wsCount++
	f.open = append(f.open, fc)
	f.mu.Unlock()
	f.conns <- fc
	fc.readLoop()
}

// fakeConn is one accepted WebSocket. Its reader answers ping, delivered and send frames by
// itself (send through the server's script); other frames go to frames.
type fakeConn struct {
	f         *fakeServer
	ws        *websocket.Conn
	cursor    int64 // ?cursor=
	cursorErr error
	mark      string // ?mark=
	auth      string // Authorization header
	qtoken    string // ?token=
	frames    chan map[string]any

	wmu sync.Mutex // serialises writes
}

func (fc *fakeConn) write(v any) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	_ = fc.ws.WriteJSON(v)
}

func (fc *fakeConn) push(evs ...SyncEvent) {
	for i := range evs {
		fc.write(protocol.PushFrame{Op: protocol.OpEvent, Event: &evs[i]})
	}
}

// closeWith sends a close frame with code, then drops the connection.
func (fc *fakeConn) closeWith(code int) {
	fc.wmu.Lock()
	_ = fc.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
	fc.wmu.Unlock()
	fc.ws.Close()
}

func (fc *fakeConn) readLoop() {
	for {
		_, data, err := fc.ws.ReadMessage()
		if err != nil {
			return
		}
		var fr map[string]any
		if json.Unmarshal(data, &fr) != nil {
			continue
		}
		id, _ := fr["id"].(string)
		switch fr["op"] {
		case protocol.OpPing:
			fc.write(map[string]any{"id": id, "code": 0, "op": protocol.OpPong})
		case protocol.OpDelivered:
			seq := int64(fr["seq"].(float64))
			fc.f.delivered <- deliveredNote{conv: fr["conv_id"].(string), seq: seq}
			fc.write(map[string]any{"id": id, "code": 0, "delivered_seq": seq})
		case protocol.OpOpen:
			conv, _ := fr["conv_id"].(string)
			fc.f.mu.Lock()
			b, ok := fc.f.briefs[conv]
			fc.f.mu.Unlock()
			if !ok {
				fc.write(protocol.ReplyFrame{ID: id, Code: http.StatusNotFound, Error: "not found"})
			} else {
				fc.write(struct {
					ID   string `json:"id"`
					Code int    `json:"code"`
					ConversationBrief
				}{id, 0, b})
			}
			fc.frames <- fr
		case protocol.OpClose, protocol.OpPresenceUnsubscribe, protocol.OpPresenceSet:
			fc.write(protocol.ReplyFrame{ID: id})
			fc.frames <- fr
		case protocol.OpPresenceSubscribe: // everyone is offline
			var req protocol.PresenceSubscribeRequest
			_ = json.Unmarshal(data, &req)
			out := struct {
				ID   string `json:"id"`
				Code int    `json:"code"`
				protocol.PresenceList
			}{ID: id, PresenceList: protocol.PresenceList{Presence: []protocol.Presence{}}}
			for _, u := range req.Users {
				out.Presence = append(out.Presence, protocol.Presence{UserID: u, State: protocol.PresenceOffline})
			}
			fc.write(out)
			fc.frames <- fr
		case protocol.OpSend:
			var req protocol.SendRequest
			_ = json.Unmarshal(data, &req)
			act, ack := fc.f.send("ws", req)
			switch {
			case act.drop:
				fc.ws.Close()
				return
			case act.status != 0:
				fc.write(protocol.ReplyFrame{ID: id, Code: act.status, Error: "scripted"})
			default:
				fc.write(struct {
					ID string `json:"id"`
					MessageAck
				}{id, ack})
			}
		default:
			fc.frames <- fr
		}
	}
}

// msgEvent is a message event at cursor: message seq of conv, from sender.
func msgEvent(cursor int64, conv string, seq int64, sender string) SyncEvent {
	data, _ := json.Marshal(Message{
		ConvID: conv, Seq: seq, MsgID: fmt.Sprintf("%s-m%d", conv, seq), ClientMsgID: fmt.Sprintf("cm%d", seq),
		SenderID: sender, ContentType: ContentText, Content: json.RawMessage(`"hi"`), CreatedAt: 1,
	})
	return SyncEvent{Cursor: cursor, Type: EventMessage, ConvID: conv, TS: 1, Data: data}
}

// setLog makes the user's log n messages from bob in conversation c1, message seq = cursor.
func (f *fakeServer) setLog(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = nil
	for i := 1; i <= n; i++ {
		f.log = append(f.log, msgEvent(int64(i), "c1", int64(i), "bob"))
	}
}

// event returns the log's event at cursor.
func (f *fakeServer) event(cursor int64) SyncEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log[cursor-1]
}

// recv waits for one value on ch, failing the test after a deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// handleHistory serves GET /v1/conversations/{id}/messages?after_seq=&limit= from f.history,
// failing first with the statuses queued in historyFail (a 429 says Retry-After: 2).
func (f *fakeServer) handleHistory(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after_seq"), 10, 64)
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = 50
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.historyAfter = append(f.historyAfter, after)
	if len(f.historyFail) > 0 {
		code := f.historyFail[0]
		f.historyFail = f.historyFail[1:]
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "2")
			writeJSON(w, code, protocol.ErrorBody{Code: code, Error: "rate limited"})
			return
		}
		writeErr(w, code, "scripted")
		return
	}
	if f.historyPage > 0 {
		limit = min(limit, f.historyPage)
	}
	all := f.history[r.PathValue("id")]
	page := MessagesPage{Messages: []Message{}}
	for _, m := range all {
		if m.Seq > after && len(page.Messages) < limit {
			page.Messages = append(page.Messages, m)
		}
	}
	page.HasMore = len(page.Messages) > 0 && page.Messages[len(page.Messages)-1].Seq < int64(len(all))
	writeJSON(w, http.StatusOK, page)
}

// groupMsg is message seq of read-fanout conversation conv, from sender.
func groupMsg(conv string, seq int64, sender string) Message {
	return Message{
		ConvID: conv, Seq: seq, MsgID: fmt.Sprintf("%s-m%d", conv, seq), ClientMsgID: fmt.Sprintf("g%d", seq),
		SenderID: sender, ContentType: ContentText, Content: json.RawMessage(`"hi"`), CreatedAt: seq,
	}
}

// addGroupMessages stores messages up to seq n in conv's history.
func (f *fakeServer) addGroupMessages(conv string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq := int64(len(f.history[conv])) + 1; seq <= n; seq++ {
		f.history[conv] = append(f.history[conv], groupMsg(conv, seq, "bob"))
	}
}
