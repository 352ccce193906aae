package client

import (
	"context"
	"net/http"

	"github.com/parleychat/parley/protocol"
)

// Offline push (docs/protocol.md section 13): a device registers where its notifications
// go, and a user mutes conversations.

// RegisterPush registers, or replaces, this device's push target: for APNs and FCM the
// device token (the APNs topic is the server's), for Web Push the browser's subscription
// JSON. 400: an unknown or unconfigured provider, or a subscription endpoint the server
// refuses; 409: the user has as many devices registered as the server allows (remove one:
// DELETE /v1/push/devices/{device_id}); 401: the token was revoked.
func (c *Client) RegisterPush(ctx context.Context, req protocol.PushRegisterRequest) (protocol.PushDevice, error) {
	var out protocol.PushDevice
	_, err := c.http.do(ctx, http.MethodPut, "/v1/push/device", nil, req, &out)
	return out, err
}

// RemovePush removes this device's push target (404 if it has none). Signing out should
// call it: a signed-out device must not be notified.
func (c *Client) RemovePush(ctx context.Context) error {
	_, err := c.http.do(ctx, http.MethodDelete, "/v1/push/device", nil, nil, nil)
	return err
}

// PushDevices lists the push targets of the user's devices.
func (c *Client) PushDevices(ctx context.Context) ([]protocol.PushDevice, error) {
	var out protocol.PushDevices
	_, err := c.http.do(ctx, http.MethodGet, "/v1/push/devices", nil, nil, &out)
	return out.Devices, err
}

// Mute silences a conversation's pushes on all the user's devices until until (Unix ms),
// or for ever with protocol.MuteForever; a muted conversation leaves the badge too.
func (c *Client) Mute(ctx context.Context, convID string, until int64) (protocol.MuteState, error) {
	var out protocol.MuteState
	_, err := c.http.do(ctx, http.MethodPut, convPath(convID, "/mute"), nil, protocol.MuteRequest{Until: &until}, &out)
	return out, err
}

// Unmute lets a conversation push again.
func (c *Client) Unmute(ctx context.Context, convID string) (protocol.MuteState, error) {
	var out protocol.MuteState
	_, err := c.http.do(ctx, http.MethodDelete, convPath(convID, "/mute"), nil, nil, &out)
	return out, err
}
