// Package apns sends push notifications through Apple's APNs provider API: HTTP/2 with token
// (.p8 key) authentication.
//
// It is a thin client on net/http and golang-jwt rather than github.com/sideshow/apns2,
// because apns2's Response (v0.25.0) drops the Retry-After header of a 429 or 503, which the
// pusher needs to schedule its retry; the rest of what apns2 adds (the JWT, the headers, the
// error body) is a hundred lines here. net/http speaks HTTP/2 over TLS by itself, and a
// caller-supplied http.Client lets tests point it at pushtest's fake with the fake's roots.
package apns

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/parleychat/parley/internal/push"
)

// DefaultEndpoint is APNs's production host. The sandbox is https://api.sandbox.push.apple.com.
const DefaultEndpoint = "https://api.push.apple.com"

// tokenTTL is how long one provider JWT is used. APNs refuses a token older than an hour
// (ExpiredProviderToken) and one refreshed more often than every 20 minutes
// (TooManyProviderTokenUpdates), so 50 minutes sits between the two with room for clock skew.
const tokenTTL = 50 * time.Minute

// minTokenAge is the shortest life APNs allows a token before it may be replaced.
const minTokenAge = 20 * time.Minute

// Options configure a Provider. KeyFile, KeyID, TeamID and Topic are required.
type Options struct {
	KeyFile string // the .p8 key from Apple's developer portal (PKCS#8 PEM, P-256)
	KeyID   string // the key's 10-character id (the JWT's kid)
	TeamID  string // the developer team id (the JWT's iss)
	// Topic is the app's bundle id, the apns-topic of every notification. It is the
	// server's to set, not the client's: the key may sign for every app of the team, and a
	// client naming another app's topic would have the server notify that app.
	Topic string
	// Endpoint is the APNs base URL; empty means DefaultEndpoint. Tests point it at
	// pushtest.APNs.
	Endpoint string
	// HTTPClient sends the requests; nil means a client of its own with a 30-second timeout.
	// Its transport must speak HTTP/2 (net/http's does over TLS); tests pass the fake's
	// Client(), which trusts the fake's certificate.
	HTTPClient *http.Client
	// Connections is how many connections requests are spread over; 0 means
	// push.DefaultConnections.
	Connections int
}

// Provider sends notifications to APNs. It is safe for concurrent use; it never retries.
type Provider struct {
	key      *ecdsa.PrivateKey
	keyID    string
	teamID   string
	topic    string // apns-topic, whatever the target says
	endpoint string
	conns    *push.Conns
	now      func() time.Time // the clock for the JWT's iat and age; tests replace it

	mu       sync.Mutex // guards token and issuedAt
	token    string     // the signed provider JWT, "" before the first Send
	issuedAt time.Time  // when token was signed (its iat)
}

var _ push.Provider = (*Provider)(nil)

// New reads the key file and returns a Provider. It signs no token yet: the first Send does.
func New(opts Options) (*Provider, error) {
	if opts.KeyFile == "" || opts.KeyID == "" || opts.TeamID == "" || opts.Topic == "" {
		return nil, errors.New("apns: KeyFile, KeyID, TeamID and Topic are required")
	}
	pemBytes, err := os.ReadFile(opts.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("apns: %w", err)
	}
	key, err := parseKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("apns: %s: %w", opts.KeyFile, err)
	}
	endpoint := strings.TrimSuffix(opts.Endpoint, "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if _, err := url.Parse(endpoint); err != nil {
		return nil, fmt.Errorf("apns: endpoint: %w", err)
	}
	return &Provider{key: key, keyID: opts.KeyID, teamID: opts.TeamID, topic: opts.Topic, endpoint: endpoint,
		conns: push.NewConns(opts.HTTPClient, opts.Connections), now: time.Now}, nil
}

// parseKey reads a .p8 file: a PKCS#8 PEM block holding an ECDSA P-256 key, as ES256 needs.
func parseKey(pemBytes []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 key")
	}
	return ec, nil
}

// bearer returns the cached provider token, signing a new one when it is tokenTTL old.
func (p *Provider) bearer() (string, error) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token != "" && now.Sub(p.issuedAt) < tokenTTL {
		return p.token, nil
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": p.teamID, "iat": now.Unix()})
	tok.Header["kid"] = p.keyID
	s, err := tok.SignedString(p.key)
	if err != nil {
		return "", fmt.Errorf("apns: signing the provider token: %w", err)
	}
	p.token, p.issuedAt = s, now
	return s, nil
}

// expire drops the cached token after APNs called it expired, unless it is younger than
// APNs lets a token be replaced (then it is the clocks that disagree, and a new token would
// only earn TooManyProviderTokenUpdates).
func (p *Provider) expire(token string) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token == token && now.Sub(p.issuedAt) >= minTokenAge {
		p.token = ""
	}
}

// Send posts one notification to APNs and maps the answer (see the package push Outcome
// docs): 200 Delivered; 410, or 400 BadDeviceToken, Unregistered; 429, 500, 503 or no answer
// Retry; any other 4xx Rejected.
func (p *Provider) Send(ctx context.Context, t push.Target, n push.Notification) push.Result {
	body, err := json.Marshal(payload(n))
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	token, err := p.bearer()
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	u := p.endpoint + "/3/device/" + url.PathEscape(t.Token)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	setHeaders(req.Header, p.topic, n)
	req.Header.Set("Authorization", "bearer "+token)
	resp, err := p.conns.Client().Do(req)
	if err != nil {
		return push.Result{Outcome: push.Retry, Reason: err.Error()}
	}
	defer resp.Body.Close()
	res := p.result(resp)
	if res.Reason == "ExpiredProviderToken" {
		p.expire(token)
	}
	return res
}

// setHeaders writes the apns-* headers of one notification. The topic is the provider's:
// a target's Topic (stored by registrations of older servers, which took it from the
// client) is not used.
func setHeaders(h http.Header, topic string, n push.Notification) {
	h.Set("Content-Type", "application/json")
	h.Set("apns-id", n.ID)
	h.Set("apns-topic", topic)
	// A badge-only update is still of type alert: "background" is for content-available
	// wake-ups, which iOS throttles; priority 5 lets APNs batch it to save the battery.
	h.Set("apns-push-type", "alert")
	if n.BadgeOnly {
		h.Set("apns-priority", "5")
	} else {
		h.Set("apns-priority", "10")
	}
	if n.CollapseID != "" {
		h.Set("apns-collapse-id", n.CollapseID)
	}
	if !n.Expiration.IsZero() {
		h.Set("apns-expiration", strconv.FormatInt(max(n.Expiration.Unix(), 0), 10))
	}
}

// aps is the dictionary APNs reads; the app's own keys sit beside it.
type aps struct {
	Alert          *alert `json:"alert,omitempty"`
	Badge          int    `json:"badge"`
	Sound          string `json:"sound,omitempty"`
	MutableContent int    `json:"mutable-content,omitempty"`
	ThreadID       string `json:"thread-id,omitempty"`
}

type alert struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

// payload is the JSON body: "aps" plus every key of n.Data() at the top level, where the
// app's notification service extension finds them to fetch the message (mutable-content).
func payload(n push.Notification) map[string]any {
	data := n.Data()
	m := make(map[string]any, len(data)+1)
	for k, v := range data {
		m[k] = v
	}
	if n.BadgeOnly {
		m["aps"] = aps{Badge: n.Badge}
		return m
	}
	m["aps"] = aps{
		Alert:          &alert{Title: n.SenderName, Body: n.Body()},
		Badge:          n.Badge,
		Sound:          "default",
		MutableContent: 1,
		ThreadID:       n.ConvID,
	}
	return m
}

// errorBody is APNs's answer to a failed request.
type errorBody struct {
	Reason    string `json:"reason"`
	Timestamp int64  `json:"timestamp"` // ms since the epoch, on a 410
}

// result maps one APNs answer to the pusher's outcome.
func (p *Provider) result(resp *http.Response) push.Result {
	res := push.Result{Status: resp.StatusCode}
	var eb errorBody
	if resp.StatusCode != http.StatusOK {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err == nil && json.Unmarshal(raw, &eb) == nil {
			res.Reason = eb.Reason
		}
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		res.Outcome = push.Delivered
	case resp.StatusCode == http.StatusGone:
		res.Outcome = push.Unregistered
		if eb.Timestamp > 0 {
			res.DeadSince = time.UnixMilli(eb.Timestamp).UTC()
		}
	case resp.StatusCode == http.StatusBadRequest && eb.Reason == "BadDeviceToken":
		res.Outcome = push.Unregistered
	case resp.StatusCode == http.StatusForbidden && eb.Reason == "ExpiredProviderToken":
		// Our token aged out (Send drops it): the next try signs a new one.
		res.Outcome = push.Retry
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		res.Outcome = push.Retry
		res.RetryAfter = push.RetryAfter(resp.Header, p.now())
	default:
		res.Outcome = push.Rejected
	}
	if res.Reason == "" && res.Outcome != push.Delivered {
		res.Reason = http.StatusText(resp.StatusCode)
	}
	return res
}
