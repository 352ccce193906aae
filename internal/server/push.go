package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/webpush"
)

// PushConfig configures offline push: which providers are on and how notifications read.
type PushConfig struct {
	APNsKeyFile    string // .p8 token-auth key; empty: APNs off
	APNsKeyID      string
	APNsTeamID     string
	APNsTopic      string // the app's bundle id: every notification's apns-topic (clients do not choose it)
	APNsEndpoint   string
	FCMCredentials string // service-account JSON; empty: FCM off
	FCMEndpoint    string
	WebPush        bool   // Web Push with VAPID keys kept among the node's secrets
	WebPushSubject string // the VAPID "sub" contact
	AllowPrivate   bool   // Web Push endpoints on private addresses and plain http (tests)
	Content        string // "none" or "preview"
	Grace          time.Duration
	// WebPushHosts are the push services Web Push endpoints may be on (webpush.Filter.Hosts
	// patterns); default webpush.DefaultHosts.
	WebPushHosts []string
	// HTTPClient, if set, is the providers' client (tests: one that trusts the fakes).
	HTTPClient *http.Client
}

// DefaultPushConfig returns the defaults: Web Push on, APNs and FCM off until given
// credentials, no message content in notifications.
func DefaultPushConfig() PushConfig {
	return PushConfig{
		APNsEndpoint:   "https://api.push.apple.com",
		FCMEndpoint:    "https://fcm.googleapis.com",
		WebPush:        true,
		WebPushSubject: "https://github.com/parleychat/parley",
		WebPushHosts:   slices.Clone(webpush.DefaultHosts),
		Content:        "none",
		Grace:          3 * time.Second,
	}
}

// Validate reports settings that cannot work, as *FieldError naming Push's fields.
func (c PushConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: "Push." + field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Content != "none" && c.Content != "preview" {
		bad("Content", "must be none or preview, not %q", c.Content)
	}
	if c.APNsKeyFile != "" && (c.APNsKeyID == "" || c.APNsTeamID == "" || c.APNsTopic == "") {
		bad("APNsKeyFile", "needs Push.APNsKeyID, Push.APNsTeamID and Push.APNsTopic")
	}
	if err := webpush.CheckHosts(c.WebPushHosts); c.WebPush && err != nil {
		bad("WebPushHosts", "%v", err)
	}
	if c.WebPush && !strings.HasPrefix(c.WebPushSubject, "mailto:") && !strings.HasPrefix(c.WebPushSubject, "https://") {
		bad("WebPushSubject", "must be a mailto: or https: URL, not %q", c.WebPushSubject)
	}
	if c.Grace < 0 {
		bad("Grace", "must not be negative")
	}
	return errors.Join(errs...)
}

// previewChars is how much of a text message --push-content preview shows.
const previewChars = 100

// newPusher makes the node's pusher with the providers cfg turns on.
func newPusher(ctx context.Context, cfg Config, s *Server, secret func(string) (string, bool, error), presence *push.Presence, several bool) (*push.Pusher, error) {
	providers, vapidPublic, err := newProviders(ctx, cfg.Push, secret)
	if err != nil {
		return nil, err
	}
	o := push.Options{Store: s.store, Facts: s.Service, Providers: providers, Presence: presence,
		Grace: cfg.Push.Grace, VAPIDPublicKey: vapidPublic, Now: cfg.Now, Log: cfg.Logger, Obs: s.Metrics}
	if cfg.Push.Content == "preview" {
		o.Preview = previewChars
	}
	if several {
		o.Settle = push.FeedSettle
	}
	return push.New(o), nil
}
