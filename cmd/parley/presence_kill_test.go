package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestClusterPresenceNodeKilled: two `parley serve` processes on one PostgreSQL database
// and a NATS server of the test's own. alice is connected only to node A, carol to both;
// bob watches them from node B. A is killed with SIGKILL, so it says no goodbye: bob sees
// alice offline once her last news from A is older than --presence-timeout, and not before
// (A's heartbeats come every timeout/3, so not before two thirds of it, well after the
// grace); carol stays online, B holding her own connection. The timeout is above the
// default 5 s coalescing (no flag), so that the online shown just before the kill does not
// hold the offline back past it.
func TestClusterPresenceNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocess nodes; skipped in -short mode")
	}
	const grace, timeout = 300 * time.Millisecond, 6 * time.Second
	ns := bustest.StartNATSServer(t, "", "")
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0",
		"--store", "postgres", "--postgres-url", pgtest.SchemaURL(t, t.Name()), "--blob-store", "file://" + t.TempDir(),
		"--bus", ns.URL("nats", ""), "--presence-grace", grace.String(), "--presence-timeout", timeout.String()}
	a, b := startServe(t, t.TempDir(), args...), startServe(t, t.TempDir(), args...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := client.NewAdmin(a.URL, crashAdminSecret, nil)
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, _, err := admin.CreateUser(ctx, u, ""); err != nil {
			t.Fatal(err)
		}
		it, err := admin.IssueToken(ctx, u, "d1", 0)
		if err != nil {
			t.Fatal(err)
		}
		tok[u] = it.Token
	}
	bobC := client.New(client.Options{BaseURL: b.URL, Token: tok["bob"], UserID: "bob"})
	for _, peer := range []string{"alice", "carol"} {
		if _, err := bobC.CreateDirect(ctx, peer); err != nil {
			t.Fatal(err)
		}
	}
	watcher := dialPresence(t, b.URL, tok["bob"])
	watcher.send(t, `{"id":"1","op":"presence_subscribe","users":["alice","carol"]}`)
	dialPresence(t, a.URL, tok["alice"])
	dialPresence(t, a.URL, tok["carol"])
	dialPresence(t, b.URL, tok["carol"])
	for seen := map[string]bool{}; !seen["alice"] || !seen["carol"]; {
		for _, e := range watcher.presence(t, 15*time.Second) {
			if e.State != "online" {
				t.Fatalf("before the kill: %+v", e)
			}
			seen[e.UserID] = true
		}
	}

	killed := time.Now()
	a.kill()
	var gone time.Duration
	for gone == 0 {
		for _, e := range watcher.presence(t, timeout+5*time.Second) {
			switch {
			case e.UserID == "carol":
				t.Fatalf("carol, still connected to B: %+v", e)
			case e.State == "offline":
				gone = time.Since(killed)
			default:
				t.Fatalf("alice after the kill: %+v", e)
			}
		}
	}
	if earliest := timeout - timeout/3 - 200*time.Millisecond; gone < earliest || gone < grace {
		t.Errorf("alice offline %v after the kill: before A's news could expire (%v)", gone, earliest)
	}
	if latest := timeout + 3*time.Second; gone > latest { // a turn a second, and a loaded machine's slack
		t.Errorf("alice offline %v after the kill, want within about %v", gone, timeout)
	}
	var got struct {
		Presence []struct {
			UserID string `json:"user_id"`
			State  string `json:"state"`
		} `json:"presence"`
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", b.URL+"/v1/presence?users=carol,alice", nil)
	req.Header.Set("Authorization", "Bearer "+tok["bob"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got.Presence) != 2 ||
		got.Presence[0].State != "online" || got.Presence[1].State != "offline" {
		t.Fatalf("GET /v1/presence on B after the kill: %+v, %v", got, err)
	}
	t.Logf("alice offline for bob %v after node A was killed (grace %v, timeout %v)", gone, grace, timeout)
}

// presenceConn is a WebSocket whose presence frames a goroutine hands on.
type presenceConn struct {
	conn   *websocket.Conn
	frames chan []presenceEntry
}

type presenceEntry struct {
	UserID string `json:"user_id"`
	State  string `json:"state"`
}

// dialPresence opens a WebSocket to baseURL as token's user; it is closed when the test ends.
func dialPresence(t *testing.T, baseURL, token string) *presenceConn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(baseURL, "http")+"/v1/ws", http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial %s: %v", baseURL, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &presenceConn{conn: conn, frames: make(chan []presenceEntry, 64)}
	go func() {
		defer close(c.frames)
		for {
			_, raw, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var f struct {
				Op       string          `json:"op"`
				Presence []presenceEntry `json:"presence"`
			}
			if json.Unmarshal(raw, &f) == nil && f.Op == "presence" {
				c.frames <- f.Presence
			}
		}
	}()
	return c
}

func (c *presenceConn) send(t *testing.T, frame string) {
	t.Helper()
	if err := c.conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

// presence returns the next presence frame's entries, failing after within.
func (c *presenceConn) presence(t *testing.T, within time.Duration) []presenceEntry {
	t.Helper()
	select {
	case es, ok := <-c.frames:
		if !ok {
			t.Fatal("the watcher's WebSocket closed")
		}
		return es
	case <-time.After(within):
		t.Fatalf("no presence frame within %v", within)
	}
	return nil
}
