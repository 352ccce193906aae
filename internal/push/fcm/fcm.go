// Package fcm sends push notifications through Firebase Cloud Messaging's HTTP v1 API,
// authenticated with a service-account key.
//
// It is a thin client on golang.org/x/oauth2/google rather than the Firebase Admin SDK: one
// send is one POST of a small JSON body, and the only hard part, minting and refreshing the
// OAuth2 access token from the service account's key, is what oauth2/google does. The Admin
// SDK would bring in dozens of modules (gRPC, the Cloud client libraries, OpenCensus) for
// that. The service account JSON's token_uri decides where tokens are minted, which is how
// tests point it at pushtest's fake.
package fcm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/parleychat/parley/internal/push"
)

// DefaultEndpoint is FCM's API host.
const DefaultEndpoint = "https://fcm.googleapis.com"

// Scope is the OAuth2 scope that lets a service account send messages.
const Scope = "https://www.googleapis.com/auth/firebase.messaging"

// Options configure a Provider. CredentialsFile is required.
type Options struct {
	CredentialsFile string // the service account's JSON key, from the Firebase console
	ProjectID       string // the Firebase project; empty means the key file's project_id
	// Endpoint is FCM's base URL; empty means DefaultEndpoint. Tests point it at
	// pushtest.FCM.
	Endpoint string
	// HTTPClient sends the messages and mints the access tokens; nil means a client of its
	// own with a 30-second timeout. Tests pass the fake's Client().
	HTTPClient *http.Client
	// Connections is how many connections requests are spread over; 0 means
	// push.DefaultConnections.
	Connections int
}

// Provider sends notifications to FCM. It is safe for concurrent use; it never retries.
type Provider struct {
	tokens  oauth2.TokenSource // caches the access token and mints a new one before expiry
	sendURL string
	conns   *push.Conns // the sends' connections (the token source has its own client)
}

var _ push.Provider = (*Provider)(nil)

// New reads the service account key and returns a Provider. It mints no token yet: the
// first Send does.
func New(opts Options) (*Provider, error) {
	if opts.CredentialsFile == "" {
		return nil, errors.New("fcm: CredentialsFile is required")
	}
	raw, err := os.ReadFile(opts.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("fcm: %w", err)
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	// The token source keeps this context for every token it mints, and reads the HTTP
	// client to mint with from it.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, client)
	// WithType, not CredentialsFromJSON: the key must be a service account, never an
	// external-account config that would make oauth2 run a command or fetch a URL.
	creds, err := google.CredentialsFromJSONWithType(ctx, raw, google.ServiceAccount, Scope)
	if err != nil {
		return nil, fmt.Errorf("fcm: %s: %w", opts.CredentialsFile, err)
	}
	project := opts.ProjectID
	if project == "" {
		project = creds.ProjectID
	}
	if project == "" {
		return nil, fmt.Errorf("fcm: %s has no project_id and Options.ProjectID is empty", opts.CredentialsFile)
	}
	endpoint := strings.TrimSuffix(opts.Endpoint, "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	return &Provider{
		tokens:  creds.TokenSource,
		sendURL: endpoint + "/v1/projects/" + url.PathEscape(project) + "/messages:send",
		conns:   push.NewConns(opts.HTTPClient, opts.Connections),
	}, nil
}

// Send posts one data-only message to FCM and maps the answer (see the package push Outcome
// docs): 200 Delivered; 404 or UNREGISTERED Unregistered; 429, 5xx or no answer Retry; any
// other 4xx (INVALID_ARGUMENT, 401, 403 SENDER_ID_MISMATCH) Rejected.
func (p *Provider) Send(ctx context.Context, t push.Target, n push.Notification) push.Result {
	body, err := json.Marshal(request{Message: message(t, n, time.Now())})
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	tok, err := p.tokens.Token()
	if err != nil {
		return tokenFailure(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.sendURL, bytes.NewReader(body))
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	tok.SetAuthHeader(req)
	resp, err := p.conns.Client().Do(req)
	if err != nil {
		return push.Result{Outcome: push.Retry, Reason: err.Error()}
	}
	defer resp.Body.Close()
	return result(resp)
}

// tokenFailure maps a failure to mint an access token: the token endpoint refusing our key
// (a 4xx) is as final as FCM's 403, anything else may pass.
func tokenFailure(err error) push.Result {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		s := re.Response.StatusCode
		if s >= 400 && s < 500 && s != http.StatusTooManyRequests {
			return push.Result{Outcome: push.Rejected, Status: s, Reason: "token: " + err.Error()}
		}
		return push.Result{Outcome: push.Retry, Status: s, Reason: "token: " + err.Error(),
			RetryAfter: push.RetryAfter(re.Response.Header, time.Now())}
	}
	return push.Result{Outcome: push.Retry, Reason: "token: " + err.Error()}
}

// request is the body of messages:send.
type request struct {
	Message v1Message `json:"message"`
}

// v1Message is the HTTP v1 message this provider sends: data only, with no "notification"
// block, so that the app decides what to show after fetching the message itself.
type v1Message struct {
	Token   string            `json:"token"`
	Data    map[string]string `json:"data"`
	Android *androidConfig    `json:"android,omitempty"`
	APNs    *apnsConfig       `json:"apns,omitempty"`
}

// androidConfig is the message's android block.
type androidConfig struct {
	CollapseKey string `json:"collapse_key,omitempty"`
	Priority    string `json:"priority"`      // HIGH wakes the device; NORMAL may wait for it
	TTL         string `json:"ttl,omitempty"` // a duration in seconds, "3600s"
}

// apnsConfig is the message's apns block, for iOS apps registered through FCM.
type apnsConfig struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// message builds the v1 message for one notification, its TTL counted from now.
func message(t push.Target, n push.Notification, now time.Time) v1Message {
	m := v1Message{Token: t.Token, Data: n.Data(), Android: &androidConfig{
		CollapseKey: n.CollapseID, Priority: "HIGH"}}
	if n.BadgeOnly {
		m.Android.Priority = "NORMAL"
	}
	if !n.Expiration.IsZero() {
		secs := max(int64(n.Expiration.Sub(now)/time.Second), 0)
		m.Android.TTL = strconv.FormatInt(secs, 10) + "s"
	}
	if n.CollapseID != "" {
		m.APNs = &apnsConfig{Headers: map[string]string{"apns-collapse-id": n.CollapseID}}
	}
	return m
}

// errorBody is a Google API error; FCM puts its own code in a FcmError detail.
type errorBody struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"` // INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, …
		Details []struct {
			Type      string `json:"@type"`
			ErrorCode string `json:"errorCode"` // UNREGISTERED, QUOTA_EXCEEDED, …
		} `json:"details"`
	} `json:"error"`
}

// reason is FCM's errorCode when it gave one, else the API status.
func (e errorBody) reason() string {
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" {
			return d.ErrorCode
		}
	}
	return e.Error.Status
}

// result maps one FCM answer to the pusher's outcome.
func result(resp *http.Response) push.Result {
	res := push.Result{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		res.Outcome = push.Delivered
		return res
	}
	var eb errorBody
	if raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); err == nil && json.Unmarshal(raw, &eb) == nil {
		res.Reason = eb.reason()
	}
	if res.Reason == "" {
		res.Reason = http.StatusText(resp.StatusCode)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || res.Reason == "UNREGISTERED":
		res.Outcome = push.Unregistered
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		res.Outcome = push.Retry
		res.RetryAfter = push.RetryAfter(resp.Header, time.Now())
	default:
		res.Outcome = push.Rejected
	}
	return res
}
