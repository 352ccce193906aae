package webpush

import (
	"crypto/ecdh"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrEndpoint is wrapped by every error of CheckEndpoint and ParseSubscription: the
// subscription a client sent cannot be used. The wrapping message says why, in words a
// client developer can act on.
var ErrEndpoint = errors.New("webpush: unusable subscription")

// ErrForbiddenAddress is wrapped by the dial error when an endpoint's host resolved, at
// connect time, to an address that CheckEndpoint would refuse (DNS rebinding, or a name
// such as localhost).
var ErrForbiddenAddress = errors.New("webpush: endpoint address not allowed")

// maxEndpointLen bounds what a client may register; real push services use about 200 bytes.
const maxEndpointLen = 2048

// blocked are the ranges a push endpoint may not be in unless private addresses are allowed:
// what is not on the public internet, so that a client cannot make the server call hosts on
// its own network. Loopback, link-local, multicast, unspecified and IPv4-mapped addresses
// are checked by netip's predicates; these are the rest.
var blocked = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a 'this network' address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (100.64/10) address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local (fc00::/7) address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local (fec0::/10) address"},
}

// checkAddr says why ip is not a public unicast address, or returns nil.
func checkAddr(ip netip.Addr) error {
	ip = ip.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	var what string
	switch {
	case !ip.IsValid():
		what = "an invalid address"
	case ip.IsLoopback():
		what = "a loopback address"
	case ip.IsUnspecified():
		what = "the unspecified address"
	case ip.IsLinkLocalUnicast():
		what = "a link-local address"
	case ip.IsMulticast():
		what = "a multicast address"
	default:
		for _, b := range blocked {
			if b.prefix.Contains(ip) {
				what = b.what
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("%s is %s, not a public push service", ip, what)
}

// CheckEndpoint says whether raw may be used as a Web Push endpoint, at registration time:
// an absolute https URL (http too when allowPrivate) with a host and no user name or
// password, whose host, when it is an IP literal or "localhost", is a public unicast address
// unless allowPrivate. A host name is resolved only when the provider connects, and the
// provider's dialer checks the address again then (a name may resolve to anything). Errors
// wrap ErrEndpoint.
func CheckEndpoint(raw string, allowPrivate bool) error {
	if err := checkEndpoint(raw, allowPrivate); err != nil {
		return fmt.Errorf("%w: endpoint: %s", ErrEndpoint, err)
	}
	return nil
}

func checkEndpoint(raw string, allowPrivate bool) error {
	if raw == "" {
		return errors.New("missing")
	}
	if len(raw) > maxEndpointLen {
		return fmt.Errorf("longer than %d bytes", maxEndpointLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	case u.Scheme == "http":
		return errors.New("must be an https URL")
	default:
		return fmt.Errorf("scheme %q: must be an https URL", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return errors.New("must be an absolute URL with a host")
	}
	if u.User != nil {
		return errors.New("must not carry a user name or password")
	}
	if u.Fragment != "" {
		return errors.New("must not have a fragment")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("must be an absolute URL with a host")
	}
	if allowPrivate {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return checkAddr(ip)
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return fmt.Errorf("host %s is this machine, not a public push service", host)
	}
	return nil
}

// Subscription is a browser's PushSubscription as JSON (PushSubscription.toJSON(), less
// expirationTime): what a client registers as its token.
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"` // the browser's P-256 public key, uncompressed, base64url
		Auth   string `json:"auth"`   // the 16-byte authentication secret, base64url
	} `json:"keys"`
}

// ParseSubscription decodes and checks a subscription as a client registers it: the
// endpoint as CheckEndpoint does, p256dh a point on P-256 and auth 16 bytes. Errors wrap
// ErrEndpoint.
func ParseSubscription(token string, allowPrivate bool) (Subscription, error) {
	var s Subscription
	if err := json.Unmarshal([]byte(token), &s); err != nil {
		return s, fmt.Errorf("%w: not a PushSubscription as JSON: %v", ErrEndpoint, err)
	}
	if err := CheckEndpoint(s.Endpoint, allowPrivate); err != nil {
		return s, err
	}
	p, err := decodeKey(s.Keys.P256dh)
	if err != nil {
		return s, fmt.Errorf("%w: keys.p256dh: not base64url", ErrEndpoint)
	}
	if _, err := ecdh.P256().NewPublicKey(p); err != nil {
		return s, fmt.Errorf("%w: keys.p256dh: not an uncompressed P-256 public key", ErrEndpoint)
	}
	a, err := decodeKey(s.Keys.Auth)
	if err != nil {
		return s, fmt.Errorf("%w: keys.auth: not base64url", ErrEndpoint)
	}
	if len(a) != 16 {
		return s, fmt.Errorf("%w: keys.auth: %d bytes, want 16", ErrEndpoint, len(a))
	}
	return s, nil
}

// decodeKey decodes base64url with or without padding (browsers send it without; some
// libraries add it).
func decodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// NewHTTPClient returns the client a Provider uses unless Options.HTTPClient replaces it:
// its dialer refuses, at connect time, the addresses CheckEndpoint refuses unless
// allowPrivate (so a name that resolves to 10.0.0.1 is refused as an IP literal would be),
// it uses no proxy from the environment (the check would see the proxy's address), and it
// follows no redirect. tlsConfig may be nil; tests pass one that trusts their server.
func NewHTTPClient(allowPrivate bool, tlsConfig *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = dialControl
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       tlsConfig,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64, // push services are few hosts, each sent to at a high rate
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// dialControl runs after the name is resolved and before each connect: address is the IP
// and port about to be dialled.
func dialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrForbiddenAddress, address, err)
	}
	if err := checkAddr(ap.Addr()); err != nil {
		return fmt.Errorf("%w: %v", ErrForbiddenAddress, err)
	}
	return nil
}
