package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// closeExpired is the close code of a connection whose token expired.
const closeExpired = 4004

// TestAttackSignatureVariants performs the malleability attack of issue 7: the last
// character of a token's signature re-spelt in each of the 3 other ways that decode to the
// same bytes under lenient base64. Only the minted spelling is accepted.
func TestAttackSignatureVariants(t *testing.T) {
	n := start(t)
	tok := n.user(t, "alice")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	for i := last &^ 3; i < last&^3+4; i++ {
		variant := tok[:len(tok)-1] + alphabet[i:i+1]
		if variant == tok {
			n.ok(t, "GET", "/v1/conversations", variant, nil)
			continue
		}
		n.fail(t, http.StatusUnauthorized, "GET", "/v1/conversations", variant, nil)
	}
}

// TestAttackRevokedSlowReader performs attack 4 of issue 7: a user whose socket reads
// slowly, in the middle of a long catch-up, keeps sending after their tokens were revoked.
// No send written after the revoke may be stored, and the socket closes with 4003 without
// finishing the catch-up.
// A client that sends nothing after the revoke is cut short too: the catch-up notices the
// revoke between pushes.
func TestAttackRevokedSlowReader(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads for a slow client, so the node never sees one")
	for _, after := range []int{10, 0} {
		t.Run(fmt.Sprintf("%d frames after the revoke", after), func(t *testing.T) {
			n := start(t, withoutWriteTimeout)
			a := newSlowReaderAttack(t, n, n.user(t, "mallory"))
			a.sendFrames(t, "before", 5)
			a.settled(t, 5)
			n.ok(t, "POST", "/v1/admin/users/mallory/revoke", n.AdminSecret, nil)
			a.sendFrames(t, "after", after)
			a.wantClosed(t, closeRevoked)
		})
	}
}

// TestAttackExpiredSlowReader is TestAttackRevokedSlowReader for a token that expires
// while its socket is open: once the node's clock passes the expiry, no frame is acted on,
// the catch-up stops at its next push and the socket closes with 4004.
//
// The catch-up used to learn of the expiry only from the reader, at the next frame (the
// connection's timer runs on real time, for which the token has a minute left): the test
// then passed only if the reader met an "after" frame before the writer, unblocked once the
// test reads, had pushed the rest, a race the writer won on a busy machine. The catch-up
// checks the token before every push now, so what ends it is that event, not an order of
// goroutines.
func TestAttackExpiredSlowReader(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads for a slow client, so the node never sees one")
	var clk clock
	n := start(t, withClock(&clk), withoutWriteTimeout)
	n.user(t, "mallory")
	var tok struct {
		Token string `json:"token"`
	}
	n.MustDo(t, "POST", "/v1/admin/tokens", n.AdminSecret, map[string]any{"user_id": "mallory", "device_id": "d1", "ttl_seconds": 60}, &tok)
	a := newSlowReaderAttack(t, n, tok.Token)
	a.sendFrames(t, "before", 5)
	a.settled(t, 5)
	clk.advance(61 * time.Second)
	a.sendFrames(t, "after", 10)
	a.wantClosed(t, closeExpired)
}

// TestWSClosedAtExpiry: a connection whose token expires is closed with 4004 at that time,
// though the client sends nothing.
func TestWSClosedAtExpiry(t *testing.T) {
	n := start(t)
	n.user(t, "alice")
	var tok struct {
		Token string `json:"token"`
	}
	n.MustDo(t, "POST", "/v1/admin/tokens", n.AdminSecret, map[string]any{"user_id": "alice", "device_id": "d1", "ttl_seconds": 1}, &tok)
	ws := n.dial(t, tok.Token, -1)
	if code := ws.closed(); code != closeExpired {
		t.Fatalf("closed with %d, want %d (token expired)", code, closeExpired)
	}
}

// withoutWriteTimeout gives a node a WebSocket write timeout that no test comes near: the
// slow-reader attacks hold the writer of their connection blocked while they set up, and
// must see it closed by the revoke or the expiry, not by how long the setup took.
func withoutWriteTimeout(c *server.Config) { c.Gateway.WriteTimeout = time.Hour }

// slowReaderAttack is a member of a conversation with a large history who connects from
// cursor 0 and does not read, so that the server's catch-up stays blocked on a full socket,
// while writing send frames.
type slowReaderAttack struct {
	n      *node
	alice  string // the other member, who checks what was stored
	convID string
	conn   *websocket.Conn
	events int // events in the attacker's log
}

// historyMessages and historyBytes make the attacker's log several times larger than the
// socket buffers of the loopback connection (a few MiB), so the catch-up cannot finish
// while the attacker does not read.
const (
	historyMessages = 150
	historyBytes    = 60 << 10
)

func newSlowReaderAttack(t *testing.T, n *node, attacker string) *slowReaderAttack {
	t.Helper()
	a := &slowReaderAttack{n: n, alice: n.user(t, "alice")}
	a.convID = n.direct(t, a.alice, "mallory")["conv_id"].(string)
	big := strings.Repeat("x", historyBytes)
	for i := range historyMessages {
		n.ok(t, "POST", "/v1/messages", a.alice, map[string]any{
			"conv_id": a.convID, "client_msg_id": fmt.Sprintf("big-%d", i), "content_type": 1, "content": map[string]any{"text": big}})
	}
	a.events = historyMessages + 1 // and the conversation's conv_updated
	conn, _, err := n.dialRaw(attacker, url.Values{"cursor": {"0"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	a.conn = conn
	return a
}

// sendFrames writes count send frames whose client_msg_ids are prefix-0, prefix-1...
func (a *slowReaderAttack) sendFrames(t *testing.T, prefix string, count int) {
	t.Helper()
	for i := range count {
		id := fmt.Sprintf("%s-%d", prefix, i)
		frame := textMessage(a.convID, id)
		frame["id"], frame["op"] = id, "send"
		b, err := json.Marshal(frame)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.conn.SetWriteDeadline(time.Now().Add(deadline))
		if err := a.conn.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Fatalf("write %s: %v", id, err)
		}
	}
}

// settled waits until the server has stored the first count frames and the catch-up has
// begun pushing: whatever ends the connection afterwards is the revoke or the expiry, met
// by the reader (at the next frame) or the writer (at the next push), not a frame that
// happened to be read after it.
func (a *slowReaderAttack) settled(t *testing.T, count int) {
	t.Helper()
	eventually(t, "the frames sent before to be stored", func() bool {
		return len(a.n.history(t, a.alice, a.convID, historyMessages)) == count
	})
	a.events += count // the attacker's own messages are in the attacker's log too
	eventually(t, "the catch-up to push", func() bool {
		return a.n.metric(t, "parley_events_pushed_total") > 0
	})
}

// wantClosed reads the socket until it closes and checks the close code, that the
// catch-up was cut short, and that no "after-" send was stored once the server has
// finished with the connection.
func (a *slowReaderAttack) wantClosed(t *testing.T, code int) {
	t.Helper()
	_ = a.conn.SetReadDeadline(time.Now().Add(deadline))
	pushed := 0
	var err error
	for err == nil {
		var data []byte
		if _, data, err = a.conn.ReadMessage(); err == nil && strings.HasPrefix(string(data), `{"op":"event"`) {
			pushed++
		}
	}
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("connection ended with %v, want close code %d", err, code)
	}
	t.Logf("the catch-up pushed %d of %d events before the close", pushed, a.events)
	if pushed >= a.events {
		t.Errorf("the catch-up pushed all %d events before the close, want it cut short", pushed)
	}
	eventually(t, "the attacker's connection to end on the server", func() bool {
		return a.n.metric(t, "parley_ws_connections") == 0
	})
	for _, m := range a.n.history(t, a.alice, a.convID, historyMessages) {
		if id, _ := m["client_msg_id"].(string); strings.HasPrefix(id, "after-") {
			t.Errorf("send %s, written after the token stopped holding, was stored", id)
		}
	}
}

// TestAttackPingFlood performs attack 10 of issue 7: 10,000 WebSocket control-frame pings
// as fast as the socket takes them. Each counts against the device's request limit (burst
// 1,000, then 500/s): pings past it get no pong, and a client that keeps going is closed
// with 1008.
func TestAttackPingFlood(t *testing.T) {
	n := start(t)
	conn, _, err := n.dialRaw(n.user(t, "mallory"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	var pongs atomic.Int64
	conn.SetPongHandler(func(string) error { pongs.Add(1); return nil })
	ended := make(chan error, 1)
	go func() { // gorilla runs the pong handler while reading
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				ended <- err
				return
			}
		}
	}()
	begin := time.Now()
	sent := 0
	for ; sent < 10_000; sent++ {
		if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(deadline)) != nil {
			break // the server closed the connection
		}
	}
	written := time.Since(begin)
	var ce *websocket.CloseError
	select {
	case err := <-ended:
		if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
			t.Fatalf("connection ended with %v, want close code 1008", err)
		}
	case <-time.After(deadline):
		t.Fatalf("connection still open after %d pings", sent)
	}
	// The bucket refills until the server stops reading, which is after the last write
	// returned (the socket buffers pings the server has not read yet): bound the pongs by
	// the time until the close arrived, not until the last write (that once undercounted
	// the refill by one).
	elapsed := time.Since(begin)
	limit := int64(1000 + 500*elapsed.Seconds() + 1)
	t.Logf("%d pings sent in %v, %d answered before the close at %v", sent, written, pongs.Load(), elapsed)
	if got := pongs.Load(); got > limit {
		t.Fatalf("%d pongs, want at most %d (the request limit)", got, limit)
	}
}
