// Package push sends offline push notifications (APNs, FCM, Web Push) from each user's
// durable event log: every registered device has a push cursor into its user's log, and a
// pusher advances it, so that a crash neither loses nor repeats a push (docs/design.md,
// "Offline push"). This file is the contract between the pusher and the providers, which
// live in subpackages (apns, fcm, webpush); pushtest holds fake provider services.
package push

import (
	"context"
	"strconv"
	"time"
)

// Provider names, as clients register them.
const (
	APNs    = "apns"
	FCM     = "fcm"
	WebPush = "webpush"
)

// Target is one device's registration with a provider.
type Target struct {
	UserID   string
	DeviceID string
	Provider string // APNs, FCM or WebPush
	// Token is the APNs device token (hex), the FCM registration token, or the Web Push
	// subscription as JSON: {"endpoint": "https://…", "keys": {"p256dh": "…", "auth": "…"}}.
	Token  string
	Topic  string // APNs: the app's bundle id (apns-topic); empty for the others
	Locale string
	// RegisteredAt is when the device registered this token: an APNs 410 whose timestamp is
	// older than it does not remove the target (the token was registered again since).
	RegisteredAt time.Time
}

// Notification is one push to one device. By default it carries no message content: the
// app fetches the message itself (APNs mutable-content, FCM data-only, a Web Push service
// worker that syncs).
type Notification struct {
	// ID is stable for one event and one device: a retry, on this node or after a crash on
	// another, sends the same ID (apns-id; "push_id" in FCM's and Web Push's data), so that a
	// provider or app can drop the repeat. It is a UUID (APNs requires one).
	ID string
	// CollapseID is the same for every notification of one conversation, so that a burst
	// shows as one (apns-collapse-id, FCM collapse_key and notification tag, Web Push Topic).
	// At most 32 characters of [A-Za-z0-9_-].
	CollapseID string
	ConvID     string
	Seq        int64
	Cursor     int64
	SenderID   string
	SenderName string
	Badge      int    // the user's unread total, muted conversations left out
	Preview    string // truncated text, only with --push-content preview
	// Kind says what an attachment message carries ("image", "file", "audio", "video"),
	// never what is in it, so that even without a preview the alert can say "Photo"; empty
	// for other messages.
	Kind string
	// BadgeOnly marks a silent update of the badge (the user read on another device): no
	// alert, no sound.
	BadgeOnly bool
	// Expiration is when the provider may drop it if the device stays unreachable.
	Expiration time.Time

	eventTS int64 // the event's commit time (Unix ms), for the lag metric
}

// Outcome is what a provider's answer means for the pusher.
type Outcome int

const (
	// Delivered: the provider accepted the notification.
	Delivered Outcome = iota
	// Retry: a transient failure (429, 5xx, a network error); try again after RetryAfter if
	// the provider said, or after the pusher's backoff.
	Retry
	// Unregistered: the token is dead (APNs 410 or BadDeviceToken, FCM UNREGISTERED or 404,
	// Web Push 404 or 410); the pusher removes the target.
	Unregistered
	// Rejected: this notification can never be delivered as it is (a 400 about the payload,
	// a 403 about our credentials); the pusher drops it, keeps the target, and logs it.
	Rejected
)

// String names the outcome in logs and metrics.
func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Retry:
		return "retry"
	case Unregistered:
		return "unregistered"
	case Rejected:
		return "rejected"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is a provider's answer to one Send.
type Result struct {
	Outcome    Outcome
	Status     int    // the HTTP status, 0 when no answer came
	Reason     string // the provider's reason (APNs "Unregistered", FCM "UNREGISTERED", …) or the error
	RetryAfter time.Duration
	// DeadSince is APNs's timestamp on a 410: when the token stopped being valid. Zero
	// otherwise.
	DeadSince time.Time
}

// Provider sends notifications through one push service. Send must be safe for
// concurrent use and must not retry on its own: the pusher owns retries, backoff and the
// durable cursor.
type Provider interface {
	Send(ctx context.Context, t Target, n Notification) Result
}

// Data is the notification's application fields as strings: FCM's data map and the JSON of
// a Web Push payload carry exactly these; APNs carries them beside "aps". Keys: type
// ("message" or "badge"), push_id, conv_id, seq, cursor, sender_id, sender_name, badge,
// and preview when there is one.
func (n Notification) Data() map[string]string {
	typ := "message"
	if n.BadgeOnly {
		typ = "badge"
	}
	d := map[string]string{
		"type":    typ,
		"push_id": n.ID,
		"badge":   strconv.Itoa(n.Badge),
	}
	if !n.BadgeOnly {
		d["conv_id"] = n.ConvID
		d["seq"] = strconv.FormatInt(n.Seq, 10)
		d["cursor"] = strconv.FormatInt(n.Cursor, 10)
		d["sender_id"] = n.SenderID
		d["sender_name"] = n.SenderName
		if n.Preview != "" {
			d["preview"] = n.Preview
		}
		if n.Kind != "" {
			d["kind"] = n.Kind
		}
	}
	return d
}
