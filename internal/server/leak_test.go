package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestNodeLeavesNoGoroutine starts a node, gives its background paths work (a read-fanout
// group's live push and batched read positions, a direct message, a WebSocket, offline
// push's feed with a bus), shuts it down, and checks that every goroutine it started has
// returned: on each engine, and on a NATS bus.
func TestNodeLeavesNoGoroutine(t *testing.T) {
	engines := []struct {
		name      string
		configure func(t *testing.T, c *server.Config) (closeBus func())
	}{
		{"pebble", func(t *testing.T, c *server.Config) func() { c.Engine = "pebble"; return nil }},
		{"sqlite", func(t *testing.T, c *server.Config) func() { c.Engine = "sqlite"; return nil }},
		{"postgres", func(t *testing.T, c *server.Config) func() {
			c.Engine, c.PostgresURL, c.BlobStore = "postgres", pgtest.SchemaURL(t, c.Data), "file://"+filepath.Join(c.Data, "blobs")
			return nil
		}},
		{"pebble with NATS", func(t *testing.T, c *server.Config) func() {
			b := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: bustest.RandomPrefix(t), NoEcho: true})
			c.Engine, c.Bus = "pebble", b
			return func() { _ = b.Close() } // the caller's bus: closed here, before the check
		}},
	}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			cfg := server.DefaultConfig(t.TempDir())
			cfg.AdminSecret = strings.Repeat("s", server.MinAdminSecret)
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			cfg.Chat.WriteFanoutMax = 2 // a group of three is in read fanout
			closeBus := e.configure(t, &cfg)
			// What runs now (the test's, an earlier subtest's closing connections, a
			// database pool of the test helpers) is not the node's.
			before := goleak.IgnoreCurrent()
			exercise(t, cfg)
			if closeBus != nil {
				closeBus()
			}
			goleak.VerifyNone(t, before)
		})
	}
}

// exercise runs a node with cfg through its background paths, then shuts it down.
func exercise(t *testing.T, cfg server.Config) {
	t.Helper()
	srv, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, token string, body, out any) {
		t.Helper()
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
	}
	tokens := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol"} {
		call("POST", "/v1/admin/users", srv.AdminSecret, map[string]string{"user_id": u}, nil)
		var tok struct{ Token string }
		call("POST", "/v1/admin/tokens", srv.AdminSecret, map[string]string{"user_id": u, "device_id": "d1"}, &tok)
		tokens[u] = tok.Token
	}
	h := http.Header{"Authorization": {"Bearer " + tokens["bob"]}}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/v1/ws?cursor=0", h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var group struct {
		ConvID string `json:"conv_id"`
	}
	call("POST", "/v1/conversations", tokens["alice"], map[string]any{"type": "group", "name": "g", "members": []string{"bob", "carol"}, "read_detail": true}, &group)
	var direct struct {
		ConvID string `json:"conv_id"`
	}
	call("POST", "/v1/conversations", tokens["alice"], map[string]any{"type": "direct", "peer_id": "bob"}, &direct)
	for i, conv := range []string{group.ConvID, direct.ConvID, group.ConvID} {
		call("POST", "/v1/messages", tokens["alice"], map[string]any{"conv_id": conv, "client_msg_id": "m" + string(rune('0'+i)),
			"content_type": 1, "content": map[string]any{"text": "hi"}}, nil)
	}
	call("POST", "/v1/conversations/"+group.ConvID+"/read", tokens["bob"], map[string]any{"seq": 2}, nil)
	call("POST", "/v1/conversations/"+group.ConvID+"/read", tokens["carol"], map[string]any{"seq": 1}, nil)
	call("POST", "/v1/conversations/"+direct.ConvID+"/read", tokens["bob"], map[string]any{"seq": 1}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
	_ = ws.Close()
}
