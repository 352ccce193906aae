package protocol

import "encoding/json"

// Push providers a device registers with (docs/protocol.md section 13).
const (
	PushAPNs    = "apns"
	PushFCM     = "fcm"
	PushWebPush = "webpush"
)

// Limits of a push registration.
const (
	MaxPushTokenLen  = 4096 // token, or the subscription's JSON
	MaxPushTopicLen  = 255
	MaxPushLocaleLen = 35 // a BCP 47 tag
)

// PushRegisterRequest is the body of PUT /v1/push/device: the calling device's push target.
// APNs and FCM name a Token; Web Push gives the browser's PushSubscription (its toJSON())
// as Subscription. Topic is ignored for APNs, whose topic is the server's (--apns-topic),
// and refused for the others: it is kept for clients written for earlier servers.
type PushRegisterRequest struct {
	Provider     string          `json:"provider"`
	Token        string          `json:"token"`
	Topic        string          `json:"topic"`
	Subscription json.RawMessage `json:"subscription"`
	Locale       string          `json:"locale"`
}

// PushDevice is one registered device as the API shows it. Token is shown cut to its
// last 8 characters (a Web Push subscription by its endpoint's origin): enough to tell
// registrations apart, not enough to reuse them.
type PushDevice struct {
	DeviceID     string `json:"device_id"`
	Provider     string `json:"provider"`
	Token        string `json:"token"`
	Topic        string `json:"topic,omitempty"`
	Locale       string `json:"locale,omitempty"`
	RegisteredAt int64  `json:"registered_at"`
}

// PushDevices answers GET /v1/push/devices.
type PushDevices struct {
	Devices []PushDevice `json:"devices"`
}

// VAPIDKey answers GET /v1/push/vapid: the server's Web Push application server key
// (base64url, an uncompressed P-256 point), for PushManager.subscribe.
type VAPIDKey struct {
	PublicKey string `json:"public_key"`
}

// MuteRequest is the body of PUT /v1/conversations/{id}/mute. Until is a Unix time in
// milliseconds; absent (or null) mutes for ever.
type MuteRequest struct {
	Until *int64 `json:"until"`
}

// MuteState answers the mute calls: MutedUntil is 0 when the conversation is not muted,
// and MuteForever when it is muted for ever.
type MuteState struct {
	ConvID     string `json:"conv_id"`
	MutedUntil int64  `json:"muted_until"`
}

// MuteForever is MutedUntil's value for a conversation muted until unmuted (2^53-1, the
// largest integer JavaScript holds exactly).
const MuteForever int64 = 1<<53 - 1

// PushTestResult is one device's answer to POST /v1/admin/users/{id}/push-test.
type PushTestResult struct {
	DeviceID string `json:"device_id"`
	Provider string `json:"provider"`
	Outcome  string `json:"outcome"` // delivered, retry, unregistered, rejected, or unconfigured
	Status   int    `json:"status,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// PushTestResults answers POST /v1/admin/users/{id}/push-test.
type PushTestResults struct {
	Results []PushTestResult `json:"results"`
}
