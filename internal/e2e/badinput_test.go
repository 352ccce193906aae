package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/server"
)

// TestBadInputHTTP sends malformed, mistyped, incomplete and oversized requests. Each must
// get its code with an error body, and the node must go on serving another user.
func TestBadInputHTTP(t *testing.T) {
	n := start(t)
	admin := n.AdminSecret
	alice := n.user(t, "alice")
	n.user(t, "bob")
	carol := n.user(t, "carol")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	other := n.direct(t, carol, "bob")["conv_id"].(string)

	send := func(fields map[string]any) map[string]any {
		m := textMessage(convID, "ok-id")
		for k, v := range fields {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	// contentOf returns a JSON string value whose encoding is exactly size bytes.
	contentOf := func(size int) string { return strings.Repeat("x", size-2) }

	cases := []struct {
		name         string
		method, path string
		token        string
		body         any
		want         int
	}{
		{"malformed JSON", "POST", "/v1/messages", alice, `{"conv_id":`, 400},
		{"trailing garbage", "POST", "/v1/messages", alice, `{"conv_id":"x"} {`, 400},
		{"body is an array", "POST", "/v1/messages", alice, `[1,2]`, 400},
		{"empty body", "POST", "/v1/messages", alice, ``, 400},
		{"content_type is a string", "POST", "/v1/messages", alice, send(map[string]any{"content_type": "1"}), 400},
		{"content_type 0", "POST", "/v1/messages", alice, send(map[string]any{"content_type": 0}), 400},
		{"content_type negative", "POST", "/v1/messages", alice, send(map[string]any{"content_type": -5}), 400},
		{"content_type fractional", "POST", "/v1/messages", alice, send(map[string]any{"content_type": 1.5}), 400},
		{"extra is not a string map", "POST", "/v1/messages", alice, send(map[string]any{"extra": map[string]any{"k": 1}}), 400},
		{"conv_id is a number", "POST", "/v1/messages", alice, send(map[string]any{"conv_id": 7}), 400},
		{"missing content", "POST", "/v1/messages", alice, send(map[string]any{"content": nil}), 400},
		{"missing client_msg_id", "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": nil}), 400},
		{"missing conv_id", "POST", "/v1/messages", alice, send(map[string]any{"conv_id": nil}), 400},
		{"missing content_type", "POST", "/v1/messages", alice, send(map[string]any{"content_type": nil}), 400},
		{"conv_id with slash", "POST", "/v1/messages", alice, send(map[string]any{"conv_id": "a/b"}), 400},
		{"conv_id of 129 chars", "POST", "/v1/messages", alice, send(map[string]any{"conv_id": strings.Repeat("c", 129)}), 400},
		{"client_msg_id with dot", "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": "a.b"}), 400},
		{"client_msg_id of 65 chars", "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": strings.Repeat("m", 65)}), 400},
		{"client_msg_id with space", "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": "a b"}), 400},
		{"content over 64 KiB", "POST", "/v1/messages", alice, send(map[string]any{"content": contentOf(64<<10 + 1)}), 413},
		{"content plus extra over 64 KiB", "POST", "/v1/messages", alice,
			send(map[string]any{"content": contentOf(64<<10 - 100), "extra": map[string]string{"k": strings.Repeat("v", 100)}}), 413},
		{"body over the limit", "POST", "/v1/messages", alice, send(map[string]any{"content": contentOf(3 << 20)}), 413},
		{"well-formed unknown conv_id", "POST", "/v1/messages", alice, send(map[string]any{"conv_id": "nosuchconv"}), 404},
		{"unknown conversation", "GET", "/v1/conversations/nosuchconv", alice, nil, 404},
		{"unknown conversation history", "GET", "/v1/conversations/nosuchconv/messages", alice, nil, 404},
		{"conv_id with slash in path", "GET", "/v1/conversations/a%2Fb", alice, nil, 400},
		{"conv_id with dot in path", "GET", "/v1/conversations/a.b", alice, nil, 400},
		{"read seq missing", "POST", "/v1/conversations/" + convID + "/read", alice, `{}`, 400},
		{"read seq is a string", "POST", "/v1/conversations/" + convID + "/read", alice, `{"seq":"1"}`, 400},
		{"read seq negative", "POST", "/v1/conversations/" + convID + "/read", alice, `{"seq":-1}`, 400},
		{"delivered seq negative", "POST", "/v1/conversations/" + convID + "/delivered", alice, `{"seq":-1}`, 400},
		{"recall seq missing", "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": convID}, 400},
		{"user_id with spaces", "POST", "/v1/admin/users", admin, map[string]any{"user_id": "a b"}, 400},
		{"user_id of 65 chars", "POST", "/v1/admin/users", admin, map[string]any{"user_id": strings.Repeat("u", 65)}, 400},
		{"user_id empty", "POST", "/v1/admin/users", admin, map[string]any{"user_id": ""}, 400},
		{"user_id is a number", "POST", "/v1/admin/users", admin, `{"user_id":5}`, 400},
		{"device_id with slash", "POST", "/v1/admin/tokens", admin, map[string]any{"user_id": "alice", "device_id": "a/b"}, 400},
		{"revoke user_id with space", "POST", "/v1/admin/users/a%20b/revoke", admin, nil, 400},
		{"conversation type unknown", "POST", "/v1/conversations", alice, map[string]any{"type": "channel"}, 400},
		{"direct without peer", "POST", "/v1/conversations", alice, map[string]any{"type": "direct"}, 400},
		{"direct with self", "POST", "/v1/conversations", alice, map[string]any{"type": "direct", "peer_id": "alice"}, 400},
		{"direct with unknown peer", "POST", "/v1/conversations", alice, map[string]any{"type": "direct", "peer_id": "nobody"}, 404},
		{"group members not an array", "POST", "/v1/conversations", alice, `{"type":"group","members":"bob"}`, 400},
		{"group with unknown member", "POST", "/v1/conversations", alice, map[string]any{"type": "group", "members": []string{"bob", "nobody"}}, 404},
		{"group member with space", "POST", "/v1/conversations", alice, map[string]any{"type": "group", "members": []string{"b ob"}}, 400},
		{"receipts without seq", "GET", "/v1/conversations/" + convID + "/receipts", alice, nil, 400},
		{"receipts seq not a number", "GET", "/v1/conversations/" + convID + "/receipts?seq=x", alice, nil, 400},
		{"history after_seq not a number", "GET", "/v1/conversations/" + convID + "/messages?after_seq=x", alice, nil, 400},
		{"sync without cursor", "GET", "/v1/sync", alice, nil, 400},
		{"sync cursor negative", "GET", "/v1/sync?cursor=-1", alice, nil, 400},
		{"sync cursor not a number", "GET", "/v1/sync?cursor=x", alice, nil, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n.fail(t, c.want, c.method, c.path, c.token, c.body)
			// The node still serves someone else.
			n.send(t, carol, other, fmt.Sprintf("after-%d", time.Now().UnixNano()))
		})
	}

	t.Run("content of exactly 64 KiB is accepted", func(t *testing.T) {
		n.ok(t, "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": "max-1", "content": contentOf(64 << 10)}))
		n.ok(t, "POST", "/v1/messages", alice, send(map[string]any{
			"client_msg_id": "max-2", "content": contentOf(64<<10 - 11), "extra": map[string]string{"k": "v"}, // {"k":"v"} is 9 bytes
		}))
	})
	t.Run("any JSON value is content", func(t *testing.T) {
		for i, content := range []any{false, 0, "", []any{}, map[string]any{}, 1.5, "text"} {
			ack := n.ok(t, "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": fmt.Sprintf("any-%d", i), "content": content}))
			m := n.history(t, alice, convID, num(ack["seq"])-1)[0]
			if show(m["content"]) != show(content) {
				t.Fatalf("content %s came back as %s", show(content), show(m["content"]))
			}
		}
		n.ok(t, "POST", "/v1/messages", alice, send(map[string]any{"client_msg_id": "app-type", "content_type": 100}))
	})
	t.Run("chunked body over the limit", func(t *testing.T) {
		// A body of unknown length (no Content-Length) is cut off at the limit too.
		body := `{"conv_id":"` + convID + `","client_msg_id":"chunked","content_type":1,"content":"` + strings.Repeat("x", 2<<20) + `"}`
		req, err := http.NewRequest("POST", n.URL+"/v1/messages", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkErrorBody(t, "chunked body", response{status: resp.StatusCode, header: resp.Header, raw: raw}, http.StatusRequestEntityTooLarge)
		n.send(t, carol, other, "after-chunked")
	})
	// PROTOCOL 6 measures content plus extra "as the bytes of their JSON encoding in the
	// request": 15000 raw U+2028 characters (45000 bytes) are well under 64 KiB, although
	// encoding/json would re-encode each as a 6-byte escape.
	t.Run("extra is measured in request bytes", func(t *testing.T) {
		body := `{"conv_id":"` + convID + `","client_msg_id":"linesep","content_type":1,"content":"x","extra":{"k":"` + strings.Repeat("\u2028", 15000) + `"}}`
		if len(body) > 64<<10 {
			t.Fatalf("test body is %d bytes", len(body))
		}
		n.ok(t, "POST", "/v1/messages", alice, body)
	})
	t.Run("user_id of 64 chars is accepted", func(t *testing.T) {
		n.expect(t, http.StatusCreated, "POST", "/v1/admin/users", admin, map[string]any{"user_id": strings.Repeat("u", 64)})
		n.expect(t, http.StatusCreated, "POST", "/v1/admin/users", admin, map[string]any{"user_id": "a.b@c-d_e"})
	})
	t.Run("nothing was stored by the rejected sends", func(t *testing.T) {
		for _, m := range n.history(t, alice, convID, 0) {
			if id := m["client_msg_id"].(string); !strings.HasPrefix(id, "max-") && !strings.HasPrefix(id, "any-") && id != "app-type" && id != "linesep" {
				t.Fatalf("a rejected send was stored: %s", show(m))
			}
		}
	})
}

// TestAuthErrors covers the 401s of PROTOCOL section 3 over HTTP and on the WebSocket
// upgrade, which must be refused with HTTP 401 and no connection.
func TestAuthErrors(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk))
	other := start(t) // another node: another signing key
	admin := n.AdminSecret
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	n.direct(t, bob, "alice")

	foreign := other.user(t, "alice")
	expiring := n.ok(t, "POST", "/v1/admin/tokens", admin, map[string]any{"user_id": "alice", "device_id": "old", "ttl_seconds": 60})["token"].(string)
	n.ok(t, "GET", "/v1/conversations", expiring, nil)
	clk.advance(2 * time.Minute)
	mallory := n.user(t, "mallory")
	n.ok(t, "POST", "/v1/admin/users/mallory/revoke", admin, nil)

	// A forged token: alice's with the first character of its signature changed.
	aParts, bParts := strings.Split(alice, "."), strings.Split(bob, ".")
	if len(aParts) != 3 || len(bParts) != 3 {
		t.Fatalf("tokens %q and %q are not v1.<claims>.<mac>: update this test", alice, bob)
	}
	flip := map[byte]string{'A': "B"}[aParts[2][0]]
	if flip == "" {
		flip = "A"
	}
	forged := aParts[0] + "." + aParts[1] + "." + flip + aParts[2][1:]
	// A token claiming to be bob's: bob's claims with alice's MAC.
	swapped := aParts[0] + "." + bParts[1] + "." + aParts[2]

	cases := []struct {
		name  string
		token string
	}{
		{"missing", ""},
		{"garbage", "not-a-token"},
		{"forged signature", forged},
		{"claims of another user", swapped},
		{"signed by another node", foreign},
		{"expired", expiring},
		{"revoked", mallory},
		{"admin secret as a user token", admin},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n.fail(t, http.StatusUnauthorized, "GET", "/v1/conversations", c.token, nil)
			n.fail(t, http.StatusUnauthorized, "POST", "/v1/messages", c.token, textMessage("x", "y"))
			checkUpgradeRefused(t, n, c.token, false)
			checkUpgradeRefused(t, n, c.token, true)
			n.ok(t, "GET", "/v1/conversations", bob, nil) // others still served
		})
	}
	t.Run("user token is not the admin secret", func(t *testing.T) {
		for _, tok := range []string{alice, "", "wrong-secret"} {
			n.fail(t, http.StatusUnauthorized, "POST", "/v1/admin/users", tok, map[string]any{"user_id": "eve"})
			n.fail(t, http.StatusUnauthorized, "POST", "/v1/admin/tokens", tok, map[string]any{"user_id": "alice", "device_id": "x"})
			n.fail(t, http.StatusUnauthorized, "POST", "/v1/admin/users/alice/revoke", tok, nil)
		}
	})
	t.Run("non-bearer scheme", func(t *testing.T) {
		req, _ := http.NewRequest("GET", n.URL+"/v1/conversations", nil)
		req.Header.Set("Authorization", "Basic "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkErrorBody(t, "Basic auth", response{status: resp.StatusCode, header: resp.Header, raw: raw}, http.StatusUnauthorized)
	})
	t.Run("minted after revoke works", func(t *testing.T) {
		fresh := n.Token(t, "mallory", "d1")
		n.ok(t, "GET", "/v1/conversations", fresh, nil)
	})
}

// checkUpgradeRefused dials /v1/ws with token (in the query when inQuery) and expects a
// plain HTTP 401 with an error body, and no WebSocket.
func checkUpgradeRefused(t *testing.T, n *node, token string, inQuery bool) {
	t.Helper()
	var conn *websocket.Conn
	var resp *http.Response
	var err error
	if inQuery {
		q := url.Values{}
		if token != "" {
			q.Set("token", token)
		}
		conn, resp, err = n.dialRaw("", q)
	} else {
		conn, resp, err = n.dialRaw(token, nil)
	}
	if err == nil {
		conn.Close()
		t.Fatalf("WebSocket upgrade with a bad token (query %v) succeeded", inQuery)
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("WebSocket upgrade with a bad token (query %v): %v %v, want HTTP 401", inQuery, err, resp)
	}
	raw, _ := io.ReadAll(resp.Body)
	checkErrorBody(t, "refused upgrade", response{status: resp.StatusCode, header: resp.Header, raw: raw}, http.StatusUnauthorized)
}

// TestBadInputWebSocket sends bad frames: each gets an error reply and the connection stays
// open, except a frame over 1 MiB, which closes that connection only.
func TestBadInputWebSocket(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	ws := n.dial(t, alice, -1)
	bobWS := n.dial(t, bob, -1)

	cases := []struct {
		name   string
		frame  string
		wantID string
		want   int
	}{
		{"not JSON", `hello`, "", 400},
		{"truncated JSON", `{"id":"t1","op":"pi`, "", 400},
		{"array", `[1]`, "", 400},
		{"id is a number", `{"id":5,"op":"ping"}`, "", 400},
		{"unknown op", `{"id":"u1","op":"dance"}`, "u1", 400},
		{"missing op", `{"id":"m1"}`, "m1", 400},
		{"op is a number", `{"id":"o1","op":3}`, "o1", 400},
		{"send missing content", fmt.Sprintf(`{"id":"s1","op":"send","conv_id":%q,"client_msg_id":"x","content_type":1}`, convID), "s1", 400},
		{"send content_type string", fmt.Sprintf(`{"id":"s2","op":"send","conv_id":%q,"client_msg_id":"x","content_type":"1","content":1}`, convID), "s2", 400},
		{"send client_msg_id with dot", fmt.Sprintf(`{"id":"s3","op":"send","conv_id":%q,"client_msg_id":"a.b","content_type":1,"content":1}`, convID), "s3", 400},
		{"send conv_id with slash", `{"id":"s4","op":"send","conv_id":"a/b","client_msg_id":"x","content_type":1,"content":1}`, "s4", 400},
		{"send over 64 KiB", fmt.Sprintf(`{"id":"s5","op":"send","conv_id":%q,"client_msg_id":"x","content_type":1,"content":"%s"}`, convID, strings.Repeat("x", 64<<10)), "s5", 413},
		{"read without conv_id", `{"id":"r1","op":"read","seq":1}`, "r1", 400},
		{"read seq negative", fmt.Sprintf(`{"id":"r2","op":"read","conv_id":%q,"seq":-1}`, convID), "r2", 400},
		{"sync without cursor", `{"id":"y1","op":"sync"}`, "y1", 400},
		{"sync cursor ahead", `{"id":"y2","op":"sync","cursor":999}`, "y2", 409},
		{"recall unknown seq", fmt.Sprintf(`{"id":"x1","op":"recall","conv_id":%q,"seq":7}`, convID), "x1", 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws.write(c.frame)
			r := ws.reply()
			wantKeys(t, "error reply", r, "id", "code", "error")
			wantFields(t, "error reply", r, map[string]any{"id": c.wantID, "code": c.want})
			ws.ping() // still open
		})
	}
	t.Run("frame over 1 MiB closes that connection only", func(t *testing.T) {
		big := n.dial(t, n.Token(t, "alice", "d2"), -1)
		pad := strings.Repeat("x", 1<<20)
		big.write(`{"id":"big","op":"ping","pad":"` + pad + `"}`)
		if code := big.closed(); code != websocket.CloseMessageTooBig && code != -1 {
			t.Fatalf("close code %d, want 1009 (or a dropped connection)", code)
		}
		ws.ping()
		bobWS.ping()
		n.send(t, bob, convID, "still-fine")
		if ev := bobWS.event(); ev["type"] != "message" {
			t.Fatalf("bob's push %s", show(ev))
		}
	})
}

// TestRateLimit configures a small send limit and floods it over HTTP and WebSocket: 429
// with Retry-After (HTTP) and retry_after (WebSocket), and other users unaffected.
func TestRateLimit(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Gateway.SendRate, c.Gateway.SendBurst = 0.01, 3 })
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)

	t.Run("http", func(t *testing.T) {
		var limited response
		for i := 0; i < 10; i++ {
			r := n.call(t, "POST", "/v1/messages", alice, textMessage(convID, fmt.Sprintf("h%d", i)))
			if r.status == http.StatusTooManyRequests {
				limited = r
				break
			}
			if r.status != http.StatusOK {
				t.Fatalf("send %d: %d %s", i, r.status, r.raw)
			}
		}
		if limited.status == 0 {
			t.Fatal("10 sends at once with a burst of 3 were never limited")
		}
		checkErrorBody(t, "flood", limited, http.StatusTooManyRequests)
		if ra, err := strconv.Atoi(limited.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q, want whole seconds >= 1", limited.header.Get("Retry-After"))
		}
		n.ok(t, "GET", "/v1/conversations", alice, nil) // not a send
	})
	t.Run("websocket", func(t *testing.T) {
		ws := n.dial(t, n.Token(t, "alice", "d2"), -1)
		var limited map[string]any
		for i := 0; i < 10 && limited == nil; i++ {
			r := ws.do("send", textMessage(convID, fmt.Sprintf("w%d", i)))
			switch num(r["code"]) {
			case 0:
			case http.StatusTooManyRequests:
				limited = r
			default:
				t.Fatalf("send %d: %s", i, show(r))
			}
		}
		if limited == nil {
			t.Fatal("10 sends at once with a burst of 3 were never limited")
		}
		wantKeys(t, "429 reply", limited, "id", "code", "error", "retry_after")
		if num(limited["retry_after"]) < 1 {
			t.Fatalf("retry_after %v", limited["retry_after"])
		}
		ws.ping() // still open
	})
	t.Run("other users and devices unaffected", func(t *testing.T) {
		n.send(t, bob, convID, "bob-1")
		n.send(t, n.Token(t, "alice", "d3"), convID, "alice-d3") // limits are per device
	})
	var sent []int64
	for _, m := range n.history(t, bob, convID, 0) {
		sent = append(sent, num(m["seq"]))
	}
	if len(sent) != 8 {
		b, _ := json.Marshal(sent)
		t.Fatalf("history %s: want 3 + 3 + 1 accepted sends of alice and 1 of bob", b)
	}
}
