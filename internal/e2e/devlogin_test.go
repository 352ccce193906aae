package e2e

import (
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/server"
)

// TestAttackDevLoginRebinding performs the DNS-rebinding sign-in of issue 7: a foreign page
// whose host name resolves to 127.0.0.1 makes the browser POST to the dev login with its own
// Host and Origin and a text/plain body (no preflight). Each of the three marks is refused
// on its own, no user is created, and the server's own page still signs in.
func TestAttackDevLoginRebinding(t *testing.T) {
	parleytest.OneNode(t, "the dev login checks the Host the node sees, which behind the balancer is the balancer's")
	n := start(t, func(c *server.Config) { c.Gateway.DevLogin = true })
	self := strings.TrimPrefix(n.URL, "http://")
	_, port, _ := strings.Cut(self, ":")
	tests := []struct {
		name, host, origin, ctype string
		want                      int
	}{
		{"the rebinding request of the issue", "attacker.example", "http://attacker.example", "text/plain", 403},
		{"foreign Host", "attacker.example:" + port, "", "application/json", 403},
		{"foreign Origin", self, "http://attacker.example", "application/json", 403},
		{"opaque Origin", self, "null", "application/json", 403},
		{"another loopback port", "127.0.0.1:1", "", "application/json", 403},
		{"text/plain", self, "http://" + self, "text/plain", 415},
		{"form", self, "", "application/x-www-form-urlencoded", 415},
		{"no Content-Type", self, "", "", 415},
		{"the page itself", self, "http://" + self, "application/json", 200},
		{"localhost, no port, no Origin (curl)", "localhost", "", "application/json; charset=utf-8", 200},
		{"[::1]", "[::1]:" + port, "", "application/json", 200},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			user := fmt.Sprintf("user%d", i)
			req, err := http.NewRequest("POST", n.URL+"/v1/dev/login", strings.NewReader(`{"user_id":"`+user+`","device_id":"web"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != http.StatusOK {
				checkErrorBody(t, tc.name, response{status: resp.StatusCode, header: resp.Header, raw: raw}, tc.want)
				n.fail(t, http.StatusNotFound, "POST", "/v1/admin/tokens", n.AdminSecret, map[string]string{"user_id": user, "device_id": "web"})
				return
			}
			if resp.StatusCode != http.StatusOK || object(t, raw)["token"] == "" {
				t.Fatalf("%s: %d %s, want a token", tc.name, resp.StatusCode, raw)
			}
		})
	}
}
