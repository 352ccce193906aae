package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/parleychat/parley/protocol"
)

func TestWebClientRoutes(t *testing.T) {
	ts := newTestServer(t)
	tests := []struct {
		name, path string
		status     int
		ctype      string
		contains   string
	}{
		{"page", "/", 200, "text/html; charset=utf-8", `<script type="module" src="/static/app.js">`},
		{"sdk", "/static/sdk/parley.js", 200, "text/javascript; charset=utf-8", "export class ParleyClient"},
		{"app", "/static/app.js", 200, "text/javascript; charset=utf-8", "from './sdk/parley.js'"},
		{"css", "/static/app.css", 200, "text/css; charset=utf-8", ":root"},
		{"service worker at the root", "/sw.js", 200, "text/javascript; charset=utf-8", "addEventListener('push'"},
		{"push setup", "/static/push.js", 200, "text/javascript; charset=utf-8", "export class WebPushSetup"},
		{"unknown file", "/static/nope.js", 404, "application/json", `"code":404`},
		{"no directory listing", "/static/", 404, "application/json", `"code":404`},
		{"other paths are not the page", "/index.html", 404, "application/json", "no such endpoint"},
		{"API 404s stay JSON", "/v1/nope", 404, "application/json", "no such endpoint: GET /v1/nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := ts.do("GET", tc.path, "", nil)
			if code != tc.status || h.Get("Content-Type") != tc.ctype || !strings.Contains(string(body), tc.contains) {
				t.Fatalf("GET %s = %d %q %.80q, want %d %q containing %q", tc.path, code, h.Get("Content-Type"), body, tc.status, tc.ctype, tc.contains)
			}
			if code == 200 && (h.Get("Content-Security-Policy") == "" || h.Get("ETag") == "") {
				t.Fatalf("GET %s: missing CSP or ETag: %v", tc.path, h)
			}
		})
	}

	t.Run("revalidation", func(t *testing.T) {
		_, _, h := ts.do("GET", "/static/app.js", "", nil)
		req, _ := http.NewRequest("GET", ts.URL+"/static/app.js", nil)
		req.Header.Set("If-None-Match", h.Get("ETag"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("If-None-Match: %d, want 304", resp.StatusCode)
		}
	})
}

func TestDevLoginOffIsAbsent(t *testing.T) {
	ts := newTestServer(t) // DevLogin defaults to false
	ts.wantError(404, "GET", "/v1/dev/login", "", nil)
	ts.wantError(404, "POST", "/v1/dev/login", "", `{"user_id":"alice","device_id":"web"}`)
	ts.wantError(404, "POST", "/v1/admin/tokens", testAdminSecret, protocol.TokenRequest{UserID: "alice", DeviceID: "web"}) // and no user was created
}

func TestDevLogin(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.DevLogin = true })
	ts.must(200, "GET", "/v1/dev/login", "", nil, nil)

	var first, second devLoginResponse
	ts.must(200, "POST", "/v1/dev/login", "", `{"user_id":"alice","device_id":"web"}`, &first)
	ts.must(200, "POST", "/v1/dev/login", "", `{"user_id":"alice","device_id":"phone"}`, &second)
	if first.UserID != "alice" || first.DeviceID != "web" || first.Token == "" || first.ExpiresAt == 0 || second.Token == first.Token {
		t.Fatalf("dev login answers %+v then %+v", first, second)
	}
	// The tokens are ordinary device tokens of one user.
	bob := ts.user("bob", "d1")
	c := ts.direct(first.Token, "bob")
	ts.send(second.Token, c.ConvID, "from-phone")
	var list protocol.ConversationList
	ts.must(200, "GET", "/v1/conversations", bob, nil, &list)
	if len(list.Conversations) != 1 || list.Conversations[0].LastMessage == nil || list.Conversations[0].LastMessage.SenderID != "alice" {
		t.Fatalf("bob's list: %+v", list)
	}

	for _, body := range []string{`{"user_id":"al ice","device_id":"web"}`, `{"user_id":"alice"}`, `{"user_id":"alice","device_id":"my phone"}`, `not json`, ``} {
		ts.wantError(400, "POST", "/v1/dev/login", "", body)
	}
}

func TestDevLoginRefusesRemotePeers(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.DevLogin = true })
	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:5000", 200}, {"[::1]:5000", 200}, {"[::ffff:127.0.0.1]:5000", 200},
		{"192.0.2.7:5000", 403}, {"[2001:db8::1]:5000", 403}, {"garbage", 403},
	} {
		req := httptest.NewRequest("POST", "/v1/dev/login", strings.NewReader(`{"user_id":"alice","device_id":"web"}`))
		req.RemoteAddr, req.Host = tc.remote, "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		ts.gw.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("dev login from %s = %d %s, want %d", tc.remote, rec.Code, rec.Body, tc.want)
		}
	}
}
