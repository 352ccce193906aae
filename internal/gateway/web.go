package gateway

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/parleychat/parley/protocol"
	"github.com/parleychat/parley/web"
)

// webRoutes registers the browser client (package web) at "/" and "/static/", and, only when
// Config.DevLogin is set, the development sign-in endpoint: without the flag it does not
// exist (404).
func (g *Gateway) webRoutes() {
	client := web.Handler()
	g.mux.Handle("GET /{$}", client)
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
// default lifetime. Only loopback peers are served (403 otherwise), on top of cmd/parley
// refusing --dev-login unless it listens on a loopback address.
func (g *Gateway) devLogin(w http.ResponseWriter, r *http.Request) {
	status, out, err := func() (int, any, error) {
		if !loopbackPeer(r.RemoteAddr) {
			return 0, nil, &statusError{http.StatusForbidden, "forbidden: dev login answers loopback clients only"}
		}
		body, err := g.readBody(w, r)
		if err != nil {
			return 0, nil, err
		}
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
