// Package webpush is the Web Push provider: it encrypts each notification for the browser's
// subscription (RFC 8291, aes128gcm), signs a VAPID token (RFC 8292) and POSTs it to the
// subscription's endpoint (RFC 8030), through github.com/SherClockHolmes/webpush-go.
//
// The endpoint comes from the client, so the server must not let it point at its own
// network: CheckEndpoint (and ParseSubscription) refuse such endpoints when a device
// registers, and the provider's HTTP client refuses them again when it connects, after the
// name is resolved, and follows no redirect.
package webpush

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	webpushgo "github.com/SherClockHolmes/webpush-go"

	"github.com/parleychat/parley/internal/push"
)

// DefaultTTL is how long the push service keeps a notification for an unreachable browser
// when the notification has no Expiration.
const DefaultTTL = 24 * time.Hour

// maxReason bounds how much of an error answer's body becomes Result.Reason.
const maxReason = 512

// Options configure a Provider.
type Options struct {
	// VAPIDPublicKey and VAPIDPrivateKey are the application server's P-256 key pair,
	// base64url as GenerateVAPIDKeys returns them: the uncompressed public point (65 bytes)
	// and the private scalar (32 bytes). Browsers subscribe with the public key
	// (applicationServerKey), so changing it orphans every subscription.
	VAPIDPublicKey  string
	VAPIDPrivateKey string
	// Subscriber is the VAPID "sub" claim: a contact for the push service's operators,
	// "mailto:ops@example.com" or an https URL.
	Subscriber string
	// AllowPrivate lets endpoints be http URLs and hosts on loopback or private networks:
	// for tests with a fake push service on this machine, never in production.
	AllowPrivate bool
	// Hosts are the push services endpoints may be on (Filter.Hosts): nil means
	// DefaultHosts.
	Hosts []string
	// HTTPClient replaces the client New builds with NewHTTPClient(AllowPrivate, nil). It
	// is used as it is: its dialing and redirects are its own (tests that serve TLS pass
	// NewHTTPClient(true, cfg) with a cfg that trusts their server).
	HTTPClient *http.Client
}

// Provider sends Web Push notifications. It is safe for concurrent use: it holds only
// read-only configuration and an http.Client.
type Provider struct {
	publicKey  string
	privateKey string
	subscriber string // as webpush-go wants it: without "mailto:"
	filter     Filter // which endpoints it registers and sends to
	client     *http.Client
}

var (
	_ push.Provider = (*Provider)(nil)
	_ push.Origins  = (*Provider)(nil)
)

// New checks the options and returns a Provider.
func New(o Options) (*Provider, error) {
	if err := checkVAPIDKeys(o.VAPIDPublicKey, o.VAPIDPrivateKey); err != nil {
		return nil, err
	}
	var sub string
	switch {
	case strings.HasPrefix(o.Subscriber, "mailto:") && len(o.Subscriber) > len("mailto:"):
		// webpush-go adds "mailto:" to anything that is not an https URL.
		sub = strings.TrimPrefix(o.Subscriber, "mailto:")
	case strings.HasPrefix(o.Subscriber, "https://") && len(o.Subscriber) > len("https://"):
		sub = o.Subscriber
	default:
		return nil, fmt.Errorf("webpush: Subscriber %q: want mailto:address or an https URL", o.Subscriber)
	}
	if err := CheckHosts(o.Hosts); err != nil {
		return nil, err
	}
	c := o.HTTPClient
	if c == nil {
		c = NewHTTPClient(o.AllowPrivate, nil)
	}
	return &Provider{
		publicKey:  o.VAPIDPublicKey,
		privateKey: o.VAPIDPrivateKey,
		subscriber: sub,
		filter:     Filter{AllowPrivate: o.AllowPrivate, Hosts: o.Hosts},
		client:     c,
	}, nil
}

// GenerateVAPIDKeys makes a new VAPID key pair, base64url without padding: the public key
// is what browsers subscribe with (GET /v1/push/vapid serves it).
func GenerateVAPIDKeys() (publicKey, privateKey string, err error) {
	privateKey, publicKey, err = webpushgo.GenerateVAPIDKeys()
	return publicKey, privateKey, err
}

// checkVAPIDKeys checks that the keys decode and that the public key is the private key's.
func checkVAPIDKeys(public, private string) error {
	priv, err := decodeKey(private)
	if err != nil {
		return errors.New("webpush: VAPIDPrivateKey: not base64url")
	}
	k, err := ecdh.P256().NewPrivateKey(priv)
	if err != nil {
		return fmt.Errorf("webpush: VAPIDPrivateKey: not a P-256 private key: %v", err)
	}
	pub, err := decodeKey(public)
	if err != nil {
		return errors.New("webpush: VAPIDPublicKey: not base64url")
	}
	if !bytes.Equal(k.PublicKey().Bytes(), pub) {
		return errors.New("webpush: VAPIDPublicKey is not the public key of VAPIDPrivateKey")
	}
	return nil
}

// Validate checks a subscription as a device registers it (the provider's Filter's
// ParseSubscription): the pusher calls it so that a client learns at once that its
// endpoint or keys cannot be used. Errors wrap ErrEndpoint.
func (p *Provider) Validate(token string) error {
	_, err := p.filter.ParseSubscription(token)
	return err
}

// Origin returns the origin of the subscription's endpoint, scheme://host:port in lower
// case with the port always written, or "" when the token is not a usable subscription:
// the pusher keeps a breaker and a share of its requests for each push service
// (push.Origins).
func (p *Provider) Origin(t push.Target) string {
	sub, err := p.filter.ParseSubscription(t.Token)
	if err != nil {
		return ""
	}
	return endpointOrigin(sub.Endpoint)
}

// endpointOrigin is scheme://host:port of a checked endpoint URL.
func endpointOrigin(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port()
	if port == "" {
		port = "443"
		if scheme == "http" {
			port = "80"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// PublicKey returns the VAPID public key, base64url: the applicationServerKey browsers
// subscribe with.
func (p *Provider) PublicKey() string { return p.publicKey }

// Send encrypts the JSON of n.Data() for the subscription in t.Token and posts it once.
// A subscription that does not parse, or that the Filter refuses (one registered before the
// rules or the allowed hosts changed), is Unregistered (it can never work); an endpoint whose
// address the dialer refuses is Rejected; network errors are Retry.
func (p *Provider) Send(ctx context.Context, t push.Target, n push.Notification) push.Result {
	sub, err := p.filter.ParseSubscription(t.Token)
	if err != nil {
		return push.Result{Outcome: push.Unregistered, Reason: err.Error()}
	}
	payload, err := json.Marshal(n.Data())
	if err != nil {
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
	urgency := webpushgo.UrgencyHigh
	if n.BadgeOnly {
		urgency = webpushgo.UrgencyNormal
	}
	opts := &webpushgo.Options{
		HTTPClient:      p.client,
		Subscriber:      p.subscriber,
		TTL:             ttlSeconds(n.Expiration, time.Now()),
		Urgency:         urgency,
		VAPIDPublicKey:  p.publicKey,
		VAPIDPrivateKey: p.privateKey,
	}
	if validTopic(n.CollapseID) {
		opts.Topic = n.CollapseID
	}
	s := &webpushgo.Subscription{Endpoint: sub.Endpoint}
	s.Keys.P256dh, s.Keys.Auth = sub.Keys.P256dh, sub.Keys.Auth
	resp, err := webpushgo.SendNotificationWithContext(ctx, payload, s, opts)
	if err != nil {
		return sendError(err)
	}
	defer resp.Body.Close()
	return result(resp, time.Now())
}

// sendError classifies an error from webpush-go: the http.Client's errors are *url.Error.
func sendError(err error) push.Result {
	var ue *url.Error
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	case errors.As(err, &ue):
		return push.Result{Outcome: push.Retry, Reason: err.Error()}
	default: // encryption or signing: the payload (too large) or the keys
		return push.Result{Outcome: push.Rejected, Reason: err.Error()}
	}
}

// result maps the push service's answer; it reads a little of an error's body as Reason and
// drains the rest so the connection can be reused.
func result(resp *http.Response, now time.Time) push.Result {
	r := push.Result{Status: resp.StatusCode}
	code := resp.StatusCode
	if code < 200 || code > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxReason))
		r.Reason = strings.TrimSpace(string(b))
		if r.Reason == "" {
			r.Reason = http.StatusText(code)
		}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case code >= 200 && code <= 299:
		r.Outcome = push.Delivered
	case code == http.StatusNotFound || code == http.StatusGone:
		r.Outcome = push.Unregistered
	case code == http.StatusTooManyRequests || code >= 500:
		r.Outcome = push.Retry
		r.RetryAfter = push.RetryAfter(resp.Header, now)
	case code >= 300 && code <= 399:
		r.Outcome = push.Rejected
		r.Reason = "redirect to " + resp.Header.Get("Location") + " not followed"
	default: // 400, 401, 403, 413 and the other 4xx: as sent, it will never be accepted
		r.Outcome = push.Rejected
	}
	return r
}

// ttlSeconds is the TTL header for a notification that expires at exp: DefaultTTL without
// one, 0 (deliver now or never) when it has passed.
func ttlSeconds(exp, now time.Time) int {
	if exp.IsZero() {
		return int(DefaultTTL / time.Second)
	}
	d := exp.Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// validTopic says whether s may be a Topic header: at most 32 characters of the base64url
// alphabet (RFC 8030 5.4).
func validTopic(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}
