package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// Push is the offline push as the gateway serves it (package push implements it).
type Push interface {
	// VAPIDPublicKey is the Web Push application server key, "" when Web Push is off.
	VAPIDPublicKey() string
	// Test sends a test notification to each of the user's registered devices and returns
	// each provider's answer.
	Test(ctx context.Context, userID string) ([]protocol.PushTestResult, error)
}

// Presence is told which devices take their events live, so that the pusher leaves them
// alone (push.Presence implements it).
type Presence interface {
	Open(userID, deviceID string)
	Close(userID, deviceID string)
	// Sent: events up to cursor were written to the device's WebSocket (they count once
	// the connection has stayed open a little while).
	Sent(userID, deviceID string, cursor int64)
	// Took: the device has the events up to cursor (a sync answered them, or it named
	// the cursor).
	Took(userID, deviceID string, cursor int64)
}

// nopPresence is the Presence of a gateway without push.
type nopPresence struct{}

func (nopPresence) Open(string, string)        {}
func (nopPresence) Close(string, string)       {}
func (nopPresence) Sent(string, string, int64) {}
func (nopPresence) Took(string, string, int64) {}

func (g *Gateway) pushRoutes() {
	m := g.mux
	m.HandleFunc("GET /v1/push/vapid", g.vapidKey)
	m.Handle("PUT /v1/push/device", g.clientSession(g.registerPush))
	m.Handle("DELETE /v1/push/device", g.client(g.removeOwnPush))
	m.Handle("GET /v1/push/devices", g.client(g.pushDevices))
	m.Handle("DELETE /v1/push/devices/{device_id}", g.client(g.removePush))
	m.Handle("GET /v1/conversations/{conv_id}/mute", g.client(g.muteState))
	m.Handle("PUT /v1/conversations/{conv_id}/mute", g.client(g.mute))
	m.Handle("DELETE /v1/conversations/{conv_id}/mute", g.client(g.unmute))
	m.Handle("POST /v1/admin/users/{user_id}/push-test", g.admin(g.pushTest))
}

// vapidKey answers the Web Push application server key; it is public, so no token is
// needed (a page asks for it before it subscribes).
func (g *Gateway) vapidKey(w http.ResponseWriter, r *http.Request) {
	key := ""
	if g.push != nil {
		key = g.push.VAPIDPublicKey()
	}
	if key == "" {
		g.writeError(w, r, fmt.Errorf("%w: web push is not enabled on this server", chat.ErrNotFound))
		return
	}
	g.writeJSON(w, http.StatusOK, protocol.VAPIDKey{PublicKey: key})
}

// registerPush is handed the session: the registration's write checks in its
// transaction that the token was not revoked meanwhile.
func (g *Gateway) registerPush(r *http.Request, body []byte, sess chat.Session) (int, any, error) {
	var req protocol.PushRegisterRequest
	if err := decodeObject(body, &req); err != nil {
		return 0, nil, err
	}
	d, err := g.svc.RegisterPush(r.Context(), sess, req)
	return http.StatusOK, d, err
}

func (g *Gateway) removeOwnPush(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	return http.StatusOK, empty{}, g.svc.RemovePush(r.Context(), me, "")
}

func (g *Gateway) removePush(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	id := r.PathValue("device_id")
	if !protocol.ValidDeviceID(id) {
		return 0, nil, invalidf("device_id is malformed")
	}
	return http.StatusOK, empty{}, g.svc.RemovePush(r.Context(), me, id)
}

func (g *Gateway) pushDevices(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	ds, err := g.svc.PushDevices(r.Context(), me)
	return http.StatusOK, ds, err
}

func (g *Gateway) muteState(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	st, err := g.svc.MuteState(r.Context(), me, convID)
	return http.StatusOK, st, err
}

func (g *Gateway) mute(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	var req protocol.MuteRequest
	if err := decodeObject(body, &req); err != nil {
		return 0, nil, err
	}
	until := protocol.MuteForever
	if req.Until != nil {
		if *req.Until < 0 {
			return 0, nil, invalidf("until must not be negative")
		}
		until = *req.Until
	}
	st, err := g.svc.Mute(r.Context(), me, convID, until)
	return http.StatusOK, st, err
}

func (g *Gateway) unmute(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	st, err := g.svc.Unmute(r.Context(), me, convID)
	return http.StatusOK, st, err
}

func (g *Gateway) pushTest(r *http.Request, _ []byte) (int, any, error) {
	userID := r.PathValue("user_id")
	if !protocol.ValidUserID(userID) {
		return 0, nil, invalidf("user_id is malformed")
	}
	if g.push == nil {
		return 0, nil, invalidf("push notifications are not enabled on this server")
	}
	rs, err := g.push.Test(r.Context(), userID)
	if rs == nil {
		rs = []protocol.PushTestResult{}
	}
	return http.StatusOK, protocol.PushTestResults{Results: rs}, err
}
