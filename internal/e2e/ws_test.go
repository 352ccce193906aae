package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/server"
)

// Close codes of the gateway (internal/gateway/ws.go) beside the standard ones.
const (
	closeReplaced = 4001
	closeTooSlow  = 4002
	closeRevoked  = 4003
)

// expectCursors reads pushed events from ws and checks that they carry exactly the cursors
// from..to, in order. It returns them.
func expectCursors(t *testing.T, ws *wsClient, from, to int64) []map[string]any {
	t.Helper()
	var out []map[string]any
	for want := from; want <= to; want++ {
		ev := ws.event()
		if got := num(ev["cursor"]); got != want {
			t.Fatalf("pushed cursor %d, want %d (strictly increasing, no gaps, no repeats)", got, want)
		}
		out = append(out, ev)
	}
	return out
}

// TestWSCatchUpThenLive connects with ?cursor=N: the events after N, then live ones, with
// cursors strictly increasing and no gaps.
func TestWSCatchUpThenLive(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	for i := range 5 {
		n.send(t, alice, convID, fmt.Sprintf("before-%d", i))
	} // bob's log: conv_updated (1), five messages (2..6)

	ws := n.dial(t, bob, 3)
	pushed := expectCursors(t, ws, 4, 6)
	for i := range 3 {
		n.send(t, alice, convID, fmt.Sprintf("live-%d", i))
	}
	pushed = append(pushed, expectCursors(t, ws, 7, 9)...)
	// Caught-up and live pushes are the very events sync returns.
	for i, ev := range n.events(t, bob, 3) {
		if show(ev) != show(pushed[i]) {
			t.Fatalf("pushed event %s\nsynced event %s", show(pushed[i]), show(ev))
		}
	}
	// Replies interleave with pushes on the same connection but never disturb them.
	ws.ping()
	n.ok(t, "POST", "/v1/conversations/"+convID+"/read", bob, map[string]any{"seq": 8})
	ev := ws.event()
	wantFields(t, "read push", ev, map[string]any{"cursor": 10, "type": "read"})
	checkEventData(t, ev)
}

// TestWSCatchUpRace commits events for a user from several goroutines while a WebSocket
// connects with ?cursor=0 and catches up: it must see every cursor 1..N exactly once, in
// order, across the switch from the durable log to live pushes.
func TestWSCatchUpRace(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Gateway.SendRate, c.Gateway.RequestRate = 0, 0 })
	const rounds, senders, perSender = 3, 3, 100
	for round := range rounds {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			receiver := fmt.Sprintf("r%d", round)
			recvTok := n.user(t, receiver)
			type peer struct{ token, convID string }
			peers := make([]peer, senders)
			for i := range peers {
				tok := n.user(t, fmt.Sprintf("s%d-%d", round, i))
				peers[i] = peer{tok, n.direct(t, tok, receiver)["conv_id"].(string)}
			}
			started := make(chan struct{}) // closed once a third of the first sender's messages are in
			errs := make(chan error, senders)
			var wg sync.WaitGroup
			for i, p := range peers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range perSender {
						if i == 0 && j == perSender/3 {
							close(started)
						}
						r, err := n.request("POST", "/v1/messages", p.token, textMessage(p.convID, fmt.Sprintf("m%d", j)))
						if err == nil && r.status != http.StatusOK {
							err = fmt.Errorf("send: %d %s", r.status, r.raw)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			select {
			case <-started:
			case err := <-errs:
				t.Fatal(err)
			case <-time.After(deadline):
				t.Fatal("senders did not start")
			}
			ws := n.dial(t, recvTok, 0)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			last := n.latest(t, recvTok)
			if want := int64(senders + senders*perSender); last != want {
				t.Fatalf("receiver's latest cursor %d, want %d", last, want)
			}
			expectCursors(t, ws, 1, last)
		})
	}
}

// TestWSWithoutCursor: without ?cursor the pushes start with the events committed after
// the connection opened.
func TestWSWithoutCursor(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	n.send(t, alice, convID, "old-1")
	n.send(t, alice, convID, "old-2") // bob's log is at 3
	ws := n.dial(t, bob, -1)
	ws.ping()
	n.send(t, alice, convID, "new-1")
	ev := ws.event()
	wantFields(t, "first push", ev, map[string]any{"cursor": 4, "type": "message"})
	wantFields(t, "first push data", obj(t, ev["data"]), map[string]any{"client_msg_id": "new-1"})
}

// TestWSOps checks the exact reply of each op of PROTOCOL section 9.
func TestWSOps(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	// The token may come in the query instead of the header (browsers).
	conn, _, err := n.dialRaw("", url.Values{"token": {alice}})
	if err != nil {
		t.Fatal(err)
	}
	ws := newWSClient(t, conn)

	t.Run("ping", func(t *testing.T) {
		ws.write(`{"id":"p-1","op":"ping"}`)
		r := ws.reply()
		wantKeys(t, "pong", r, "id", "code", "op")
		wantFields(t, "pong", r, map[string]any{"id": "p-1", "code": 0, "op": "pong"})
	})
	t.Run("send", func(t *testing.T) {
		r := ws.do("send", textMessage(convID, "ws-1"))
		wantKeys(t, "send reply", r, append([]string{"id"}, ackKeys...)...)
		wantFields(t, "send reply", r, map[string]any{"code": 0, "seq": 1, "duplicate": false, "conv_id": convID, "client_msg_id": "ws-1"})
		n.send(t, n.Token(t, "bob", "d1"), convID, "bob-1")
	})
	t.Run("read and delivered", func(t *testing.T) {
		r := ws.do("delivered", map[string]any{"conv_id": convID, "seq": 2})
		wantKeys(t, "delivered reply", r, "id", "code", "delivered_seq")
		wantFields(t, "delivered reply", r, map[string]any{"code": 0, "delivered_seq": 2})
		r = ws.do("read", map[string]any{"conv_id": convID, "seq": 2})
		wantKeys(t, "read reply", r, "id", "code", "read_seq")
		wantFields(t, "read reply", r, map[string]any{"code": 0, "read_seq": 2})
	})
	t.Run("sync", func(t *testing.T) {
		r := ws.do("sync", map[string]any{"cursor": 0, "limit": 2})
		wantKeys(t, "sync reply", r, "id", "code", "cursor", "events", "has_more", "mark")
		evs := arr(t, r["events"])
		if len(evs) != 2 || num(r["cursor"]) != 2 || r["has_more"] != true {
			t.Fatalf("sync reply %s", show(r))
		}
		for _, ev := range evs {
			wantKeys(t, "SyncEvent", ev, eventKeys...)
			checkEventData(t, ev)
		}
		latest := n.latest(t, alice)
		r = ws.do("sync", map[string]any{"cursor": latest})
		if len(arr(t, r["events"])) != 0 || num(r["cursor"]) != latest || r["has_more"] != false {
			t.Fatalf("sync at the latest cursor: %s", show(r))
		}
	})
	t.Run("recall", func(t *testing.T) {
		r := ws.do("recall", map[string]any{"conv_id": convID, "seq": 1})
		wantKeys(t, "recall reply", r, "id", "code")
		wantFields(t, "recall reply", r, map[string]any{"code": 0})
	})
	t.Run("a frame of exactly 1 MiB is served", func(t *testing.T) {
		head, tail := `{"id":"big","op":"ping","pad":"`, `"}`
		ws.write(head + strings.Repeat("x", 1<<20-len(head)-len(tail)) + tail)
		r := ws.reply()
		wantFields(t, "pong", r, map[string]any{"id": "big", "code": 0, "op": "pong"})
	})
}

// TestWSHeartbeat configures a short heartbeat: a client that answers the server's pings
// stays connected well past the idle timeout; one that never reads (so never answers) is
// closed. The idle timeout is 20 heartbeats, so that the answering client may be held
// off the CPU for most of a second (a busy machine under -race) before a late pong closes
// it: with a timeout of 4 heartbeats, a stall of 150 ms would.
func TestWSHeartbeat(t *testing.T) {
	const heartbeat, idle = 50 * time.Millisecond, time.Second
	n := start(t, func(c *server.Config) {
		c.Gateway.HeartbeatInterval = heartbeat
		c.Gateway.IdleTimeout = idle
	})
	alice, bob := n.user(t, "alice"), n.user(t, "bob")

	silent, _, err := n.dialRaw(bob, nil) // never reads, so never answers a ping
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	conn, _, err := n.dialRaw(alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	pings := make(chan struct{}, 100)
	conn.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(deadline))
	})
	ws := newWSClient(t, conn)
	for i := range int(2*idle/heartbeat) + 1 { // pings for more than twice the idle timeout
		select {
		case <-pings:
		case <-ws.done:
			t.Fatalf("connection that answers pings closed after %d pings: %v", i, ws.err)
		case <-time.After(deadline):
			t.Fatalf("no ping from the server after %d", i)
		}
	}
	ws.ping()
	eventually(t, "the silent connection to be closed", func() bool { return n.metric(t, "parley_ws_connections") == 1 })
}

// TestWSReplaced: a second connection of the same device closes the first with 4001; other
// devices of the user stay connected.
func TestWSReplaced(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	first := n.dial(t, bob, -1)
	tablet := n.dial(t, n.Token(t, "bob", "tablet"), -1)
	first.ping()
	second := n.dial(t, n.Token(t, "bob", "d1"), -1) // the same device, another token
	if code := first.closed(); code != closeReplaced {
		t.Fatalf("first connection closed with %d, want %d (replaced)", code, closeReplaced)
	}
	second.ping()
	tablet.ping()
	n.send(t, alice, convID, "after-replace")
	for _, ws := range []*wsClient{second, tablet} {
		if ev := ws.event(); ev["type"] != "message" {
			t.Fatalf("push %s", show(ev))
		}
	}
}

// TestWSRevocation: revoking a user closes their open WebSockets, and their old tokens get
// 401 (HTTP and upgrade), while a token minted afterwards works. Other users stay connected.
func TestWSRevocation(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	bobTablet := n.Token(t, "bob", "tablet")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	aliceWS := n.dial(t, alice, -1)
	phone, tablet := n.dial(t, bob, -1), n.dial(t, bobTablet, -1)
	phone.ping()
	tablet.ping()

	n.ok(t, "POST", "/v1/admin/users/bob/revoke", n.AdminSecret, nil)
	for name, ws := range map[string]*wsClient{"phone": phone, "tablet": tablet} {
		ws.wantClosed("bob's "+name+" (revoked)", closeRevoked)
	}
	for _, tok := range []string{bob, bobTablet} {
		n.fail(t, http.StatusUnauthorized, "GET", "/v1/conversations", tok, nil)
		checkUpgradeRefused(t, n, tok, false)
	}
	fresh := n.Token(t, "bob", "phone")
	n.ok(t, "GET", "/v1/conversations", fresh, nil)
	ws := n.dial(t, fresh, -1)
	aliceWS.ping()
	n.send(t, alice, convID, "after-revoke")
	for _, c := range []*wsClient{ws, aliceWS} {
		if ev := c.event(); ev["type"] != "message" {
			t.Fatalf("push %s", show(ev))
		}
	}
}

// TestWSCursorErrors: a cursor ahead of the user's latest gets {"op":"error","code":409}
// and a close; a malformed cursor is refused before the upgrade.
func TestWSCursorErrors(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	n.user(t, "bob")
	n.direct(t, alice, "bob") // alice's log is at 1

	ws := n.dial(t, alice, 2)
	p := ws.push()
	wantKeys(t, "error push", p, "op", "code", "error")
	wantFields(t, "error push", p, map[string]any{"op": "error", "code": 409})
	if code := ws.closed(); code == -1 {
		t.Fatal("connection dropped without a close frame after the error push")
	}

	for _, bad := range []string{"x", "-1"} {
		_, resp, err := n.dialRaw(alice, url.Values{"cursor": {bad}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("cursor=%s: %v %v, want HTTP 400 and no upgrade", bad, err, resp)
		}
	}
	n.dial(t, alice, 1).ping() // at the latest cursor is fine
}

// TestSyncRetention: a cursor older than the retained log gets 410 over HTTP and
// {"op":"error","code":410} and a close on the WebSocket; a new snapshot's cursor works.
// The node's retention job (which it runs hourly) is triggered directly.
func TestSyncRetention(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk))
	alice := n.user(t, "alice")
	n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	n.send(t, alice, convID, "old")
	clk.advance(31 * 24 * time.Hour)
	alice = n.Token(t, "alice", "d1") // the first token expired with the jump
	if err := n.Service.PruneOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.fail(t, http.StatusGone, "GET", "/v1/sync?cursor=0", alice, nil)
	ws := n.dial(t, alice, 0)
	p := ws.push()
	wantFields(t, "error push", p, map[string]any{"op": "error", "code": 410})
	ws.closed()

	cursor := n.latest(t, alice)
	n.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d", cursor), alice, nil)
	n.send(t, alice, convID, "new")
	live := n.dial(t, alice, cursor)
	ev := live.event()
	wantFields(t, "push after retention", ev, map[string]any{"cursor": cursor + 1, "type": "message"})
}

// TestWSSlowReader: a connection that never reads, while many large events are pushed to
// it, is disconnected; another user's connection keeps working meanwhile; the slow client
// reconnects with its cursor and gets everything it missed.
func TestWSSlowReader(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads for a slow client, so the node never sees one")
	n := start(t, func(c *server.Config) {
		c.Gateway.SendQueue = 4
		c.Gateway.WriteTimeout = time.Second
		c.Gateway.SendRate, c.Gateway.RequestRate = 0, 0
	})
	alice, bob, carol := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol")
	toBob := n.direct(t, alice, "bob")["conv_id"].(string)
	toCarol := n.direct(t, alice, "carol")["conv_id"].(string)

	slow, _, err := n.dialRaw(bob, url.Values{"cursor": {"1"}}) // never read until the end
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	carolWS := n.dial(t, carol, -1)
	carolWS.ping()
	eventually(t, "two open connections", func() bool { return n.metric(t, "parley_ws_connections") == 2 })

	// Push 60 KiB events to bob until the node gives up on him; carol is served between.
	content := strings.Repeat("x", 60<<10)
	sent := 0
	for n.metric(t, "parley_ws_connections") == 2 {
		if sent == 1000 {
			t.Fatal("a connection that never reads is still open after 1000 large events")
		}
		n.ok(t, "POST", "/v1/messages", alice, map[string]any{
			"conv_id": toBob, "client_msg_id": fmt.Sprintf("big-%d", sent), "content_type": 1, "content": content,
		})
		sent++
		if sent%50 == 0 {
			carolWS.ping()
		}
	}
	t.Logf("the slow connection was dropped after %d events", sent)
	n.send(t, alice, toCarol, "hi-carol")
	if ev := carolWS.event(); ev["type"] != "message" {
		t.Fatalf("carol's push %s", show(ev))
	}
	carolWS.ping()

	// Now read what reached the slow client: whole frames in cursor order, then the end.
	lastSeen := int64(1)
	_ = slow.SetReadDeadline(time.Now().Add(deadline))
	for {
		_, data, err := slow.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			// Its buffers being full, the close frame usually cannot reach it: gorilla
			// then reports 1006 (no close frame).
			if errors.As(err, &ce) && ce.Code != closeTooSlow && ce.Code != websocket.CloseAbnormalClosure {
				t.Fatalf("slow connection closed with %d, want %d (too slow)", ce.Code, closeTooSlow)
			}
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("slow connection still open: the node kept it after giving up on it")
			}
			break
		}
		var p struct {
			Op    string `json:"op"`
			Event struct {
				Cursor int64 `json:"cursor"`
			} `json:"event"`
		}
		if err := json.Unmarshal(data, &p); err != nil || p.Op != "event" {
			t.Fatalf("slow connection frame %.200s", data)
		}
		if p.Event.Cursor != lastSeen+1 {
			t.Fatalf("slow connection got cursor %d after %d", p.Event.Cursor, lastSeen)
		}
		lastSeen = p.Event.Cursor
	}
	final := n.latest(t, bob)
	if final != int64(1+sent) {
		t.Fatalf("bob's latest cursor %d, want %d", final, 1+sent)
	}
	if lastSeen >= final {
		t.Fatalf("the slow connection received everything (%d of %d): it was waited for, not dropped", lastSeen, final)
	}
	t.Logf("the slow connection received %d of %d events before it ended", lastSeen-1, final-1)
	again := n.dial(t, bob, lastSeen)
	expectCursors(t, again, lastSeen+1, final)
}
