package gateway

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/parleychat/parley/protocol"
	"github.com/parleychat/parley/web"
)

// webRoutes registers the browser client (package web) at "/", "/sw.js" and "/static/", and, only when
// Config.DevLogin is set, the development sign-in endpoint: without the flag it does not
// exist (404).
func (g *Gateway) webRoutes() {
	client := g.timely(web.Handler())
	g.mux.Handle("GET /{$}", client)
	g.mux.Handle("GET /sw.js", client) // the service worker, whose scope is the path it is served from
	g.mux.Handle("GET /static/", client)
	if g.cfg.DevLogin {
		g.mux.HandleFunc("GET /v1/dev/login", g.devLoginInfo)
		g.mux.HandleFunc("POST /v1/dev/login", g.devLogin)
	}
}

// devLoginRequest is the body of POST /v1/dev/login.
type devLoginRequest struct {
	UserID   string `json:"user_id"`
	DeviceID string `json:"device_id"`
	Name     string `json:"name"`
}

// devLoginResponse answers POST /v1/dev/login: a device token as POST /v1/admin/tokens
// mints it, with the user and device it is for.
type devLoginResponse struct {
	UserID    string `json:"user_id"`
	DeviceID  string `json:"device_id"`
	Token     string `json:"token"`
	ExpiresAt int64  `json:"expires_at"`
}

// devLoginInfo answers GET /v1/dev/login, which the page uses to learn that dev sign-in is on.
func (g *Gateway) devLoginInfo(w http.ResponseWriter, r *http.Request) {
	g.writeJSON(w, http.StatusOK, struct {
		DevLogin bool `json:"dev_login"`
	}{true})
}

// devLogin creates the user if needed and mints a token for (user_id, device_id) with the
// default lifetime. It answers only requests that come from this machine's own browser
// page (devLoginCheck), on top of cmd/parley refusing --dev-login unless it listens on a
// loopback address.
func (g *Gateway) devLogin(w http.ResponseWriter, r *http.Request) {
	body, ok := g.admit(w, r, devLoginCheck(r))
	if !ok {
		return
	}
	status, out, err := func() (int, any, error) {
		var req devLoginRequest
		if err := decodeObject(body, &req); err != nil {
			return 0, nil, err
		}
		switch {
		case !protocol.ValidUserID(req.UserID):
			return 0, nil, invalidf("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
		case !protocol.ValidDeviceID(req.DeviceID):
			return 0, nil, invalidf("device_id must be 1-64 characters of [A-Za-z0-9_.@-]")
		}
		return g.mintDevToken(r, req)
	}()
	g.reply(w, r, status, out, err)
}

// devLoginCheck refuses a dev sign-in that does not come from a page served by this
// server to a browser on this machine. A loopback peer alone is not enough: by DNS
// rebinding, a foreign web page can make the victim's browser send a request to
// 127.0.0.1 under the attacker's host name. Such a request carries that name in Host and,
// being cross-origin, the page's Origin; and a page can send a cross-origin POST without
// a preflight only with a "simple" Content-Type such as text/plain. So the request must
// come from a loopback peer (403), name a loopback host with this server's port or none
// (403), carry no Origin or this server's own (403), and be application/json (415).
func devLoginCheck(r *http.Request) error {
	forbidden := func(why string) error {
		return &statusError{http.StatusForbidden, "forbidden: dev login " + why}
	}
	switch {
	case !loopbackPeer(r.RemoteAddr):
		return forbidden("answers loopback clients only")
	case !loopbackHost(r):
		return forbidden(fmt.Sprintf("needs a loopback Host (localhost, 127.0.0.1 or [::1], with this server's port or none), not %q", r.Host))
	case !sameOrigin(r):
		return forbidden(fmt.Sprintf("accepts no cross-origin requests: Origin %q is not this server", r.Header.Get("Origin")))
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return &statusError{http.StatusUnsupportedMediaType,
			fmt.Sprintf("unsupported media type: dev login needs Content-Type: application/json, not %q", r.Header.Get("Content-Type"))}
	}
	return nil
}

// loopbackHost reports whether the request's Host header names a loopback host
// (localhost, or a loopback IP literal) with no port or the port the request came in on.
func loopbackHost(r *http.Request) bool {
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	}
	if !strings.EqualFold(host, "localhost") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Unmap().IsLoopback() {
			return false
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if port == "" || !ok {
		return true
	}
	_, localPort, err := net.SplitHostPort(local.String())
	return err == nil && port == localPort
}

// sameOrigin reports whether the request has no Origin header, or one naming the origin
// the request was sent to (scheme and Host). A browser sends Origin on every cross-origin
// request, so its absence means a same-origin page or a tool such as curl.
func sameOrigin(r *http.Request) bool {
	origin, ok := r.Header["Origin"]
	if !ok {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return len(origin) == 1 && strings.EqualFold(origin[0], scheme+"://"+r.Host)
}

func (g *Gateway) mintDevToken(r *http.Request, req devLoginRequest) (int, any, error) {
	if _, _, err := g.svc.CreateUser(r.Context(), req.UserID, req.Name); err != nil {
		return 0, nil, err
	}
	tok, err := g.svc.IssueToken(r.Context(), req.UserID, req.DeviceID, 0)
	if err != nil {
		return 0, nil, err
	}
	g.log.Info("dev login", "user", req.UserID, "device", req.DeviceID)
	return http.StatusOK, devLoginResponse{UserID: req.UserID, DeviceID: req.DeviceID, Token: tok.Token, ExpiresAt: tok.ExpiresAt}, nil
}

// loopbackPeer reports whether a request's RemoteAddr ("ip:port") is a loopback address.
func loopbackPeer(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
