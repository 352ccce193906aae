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
	"strconv"
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

// DefaultHosts are the push services of the browsers in use (Chrome, Edge, Firefox,
// Safari, and those built on them): the endpoints a real PushSubscription carries. A
// pattern is a host name, matched exactly, or "*." and a domain, matched by any host
// under that domain (not by the domain itself); either may end in ":port" to allow that
// port instead of 443. "*" alone allows any host on 443 (the address rules still hold).
var DefaultHosts = []string{
	"fcm.googleapis.com",                // Chrome, Opera, Samsung Internet, Brave
	"updates.push.services.mozilla.com", // Firefox
	"*.push.services.mozilla.com",
	"*.notify.windows.com", // Edge (WNS)
	"web.push.apple.com",   // Safari
	"*.push.apple.com",
}

// Filter is the endpoint policy of a Provider: which subscriptions a client may register
// and the provider may send to. The zero Filter takes https on port 443, to the hosts of
// DefaultHosts, on public addresses.
type Filter struct {
	// AllowPrivate turns the host, port and address rules off and lets the endpoint be
	// plain http: for tests with a fake push service on this machine, never in production.
	AllowPrivate bool
	// Hosts are the push services allowed (patterns as DefaultHosts describes); nil means
	// DefaultHosts. CheckHosts says whether they are well formed.
	Hosts []string
}

// ErrHostPattern is wrapped by CheckHosts' errors.
var ErrHostPattern = errors.New("webpush: bad push service host pattern")

// CheckHosts reports a pattern of Filter.Hosts that cannot match anything as meant: empty,
// with a scheme or path, a port that is not 1-65535, or "*" anywhere but alone or as the
// first label.
func CheckHosts(patterns []string) error {
	if patterns != nil && len(patterns) == 0 {
		return fmt.Errorf("%w: the list is empty (\"*\" allows any public host)", ErrHostPattern)
	}
	for _, p := range patterns {
		if _, _, err := parsePattern(p); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrHostPattern, p, err)
		}
	}
	return nil
}

// parsePattern splits a host pattern into its lower-case host part and its port (443
// when it names none).
func parsePattern(p string) (host string, port string, err error) {
	host, port = p, "443"
	if i := strings.LastIndexByte(p, ':'); i >= 0 {
		host, port = p[:i], p[i+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
			return "", "", errors.New("the port must be a number 1-65535")
		}
	}
	host = strings.ToLower(host)
	if host != "*." {
		host = strings.TrimSuffix(host, ".")
	}
	rest := strings.TrimPrefix(host, "*.")
	switch {
	case host == "*":
		return host, port, nil
	case rest == "" || strings.ContainsAny(rest, "*/@[]?#% ") || strings.Contains(rest, ".."):
		return "", "", errors.New("want a host name, \"*.\" and a domain, or \"*\"")
	}
	return host, port, nil
}

// allowedHost says whether host (lower case, no trailing dot) on port is one of patterns;
// port "" matches any.
func allowedHost(patterns []string, host, port string) bool {
	for _, p := range patterns {
		ph, pp, err := parsePattern(p)
		if err != nil || port != "" && pp != port {
			continue
		}
		if ph == "*" || ph == host {
			return true
		}
		if d, ok := strings.CutPrefix(ph, "*"); ok && strings.HasSuffix(host, d) && len(host) > len(d) {
			return true
		}
	}
	return false
}

// special is the IANA IPv4 and IPv6 Special-Purpose Address Registries, and the other
// ranges that are not the public internet: a push endpoint may not be in one unless
// private addresses are allowed, so that a client cannot make the server call hosts on
// its own network (or the cloud's metadata services). Loopback, link-local, multicast and
// the unspecified addresses are named by netip's predicates first; the addresses that
// embed an IPv4 address are checked by embedded first, so that the error names it.
var special = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a 'this network' (0/8) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (100.64/10) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment (192.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation (TEST-NET-1) address"},
	{netip.MustParsePrefix("192.31.196.0/24"), "an AS112 (192.31.196/24) address"},
	{netip.MustParsePrefix("192.52.193.0/24"), "an AMT (192.52.193/24) address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay anycast (192.88.99/24) address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.175.48.0/24"), "an AS112 (192.175.48/24) address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking (198.18/15) address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation (TEST-NET-2) address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation (TEST-NET-3) address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved (240/4) address"}, // 255.255.255.255 included
	{netip.MustParsePrefix("168.63.129.16/32"), "a cloud platform's internal service address"},

	{netip.MustParsePrefix("::/96"), "an IPv4-compatible (::/96, deprecated) address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 (64:ff9b:1::/48) address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only (100::/64) address"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "a dummy (100:0:0:1::/64) address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo (2001::/32) address"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol assignment (2001::/23)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation (2001:db8::/32) address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 (2002::/16) address"},
	{netip.MustParsePrefix("2620:4f:8000::/48"), "an AS112 (2620:4f:8000::/48) address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation (3fff::/20) address"},
	{netip.MustParsePrefix("5f00::/16"), "an SRv6 SID (5f00::/16) address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local (fc00::/7) address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local (fec0::/10) address"},
}

// globalUnicast is the IPv6 space allocated for global unicast: an address outside it
// (and outside the embeddings below, which are checked by their IPv4 address) is reserved.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// nat64 is the well-known NAT64 prefix (RFC 6052): a DNS64 resolver on an IPv6-only
// network answers it for IPv4-only hosts, so it is allowed when the IPv4 address it
// embeds is.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// embedded returns the IPv4 addresses an IPv6 address carries, and the name of the
// mechanism: NAT64 and IPv4-compatible addresses end in it, 6to4 has it in bits 16-47, and
// Teredo has its server in bits 32-63 and the client in the last 32 bits, inverted.
func embedded(ip netip.Addr) (how string, v4 []netip.Addr) {
	b := ip.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case nat64.Contains(ip):
		return "NAT64", []netip.Addr{last}
	case netip.MustParsePrefix("64:ff9b:1::/48").Contains(ip):
		return "local-use NAT64", []netip.Addr{last}
	case netip.MustParsePrefix("::/96").Contains(ip):
		return "IPv4-compatible", []netip.Addr{last}
	case netip.MustParsePrefix("2002::/16").Contains(ip):
		return "6to4", []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case netip.MustParsePrefix("2001::/32").Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return "Teredo", []netip.Addr{netip.AddrFrom4(client), netip.AddrFrom4([4]byte(b[4:8]))}
	}
	return "", nil
}

// checkAddr says why ip is not a public unicast address, or returns nil.
func checkAddr(ip netip.Addr) error {
	if ip.Is4In6() {
		if err := checkAddr(ip.Unmap()); err != nil { // ::ffff:127.0.0.1 is 127.0.0.1
			return fmt.Errorf("%s is IPv4-mapped: %w", ip, err)
		}
		return nil
	}
	what := addrClass(ip)
	if what == "" {
		return nil
	}
	return fmt.Errorf("%s is %s, not a public push service", ip, what)
}

// addrClass names what ip is when it is not a public unicast address, or returns "".
func addrClass(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "an invalid address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip.Zone() != "":
		return "an address with a zone"
	}
	if how, v4s := embedded(ip); how != "" {
		for _, v4 := range v4s {
			if w := addrClass(v4); w != "" {
				return fmt.Sprintf("%s (its %s part is %s)", w, how, v4)
			}
		}
	}
	for _, b := range special {
		if b.prefix.Contains(ip) {
			return b.what
		}
	}
	if ip.Is6() && !globalUnicast.Contains(ip) && !nat64.Contains(ip) {
		return "a reserved IPv6 address (outside 2000::/3)"
	}
	return ""
}

// CheckEndpoint is Filter{AllowPrivate: allowPrivate}.Check(raw): the default hosts.
func CheckEndpoint(raw string, allowPrivate bool) error {
	return Filter{AllowPrivate: allowPrivate}.Check(raw)
}

// Check says whether raw may be used as a Web Push endpoint, at registration time: an
// absolute https URL (http too when AllowPrivate) with a host and no user name, password
// or fragment; unless AllowPrivate, on port 443 (or the port its host pattern names), to
// a host of f.Hosts, and, when the host is an IP literal, on a public unicast address. A
// host name is resolved only when the provider connects, and the provider's dialer checks
// the address again then (a name may resolve to anything). Errors wrap ErrEndpoint.
func (f Filter) Check(raw string) error {
	if err := f.check(raw); err != nil {
		return fmt.Errorf("%w: endpoint: %s", ErrEndpoint, err)
	}
	return nil
}

func (f Filter) check(raw string) error {
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
	case u.Scheme == "http" && f.AllowPrivate:
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
	if f.AllowPrivate {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := checkAddr(ip); err != nil {
			return err
		}
	} else if err := checkName(host); err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	hosts := f.Hosts
	if hosts == nil {
		hosts = DefaultHosts
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if !allowedHost(hosts, h, port) {
		if allowedHost(hosts, h, "") {
			return fmt.Errorf("port %s: this server sends to %s only on 443 or the port its allowed hosts name", port, host)
		}
		return fmt.Errorf("host %s is not a push service this server sends to", host)
	}
	return nil
}

// checkName refuses host names that are not names of the public internet: localhost, and
// a last label of digits or hex (a resolver may read "127.1" or "0x7f.1" as an address).
func checkName(host string) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return fmt.Errorf("host %s is this machine, not a public push service", host)
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if _, err := strconv.ParseUint(last, 0, 64); err == nil || strings.HasPrefix(last, "0x") {
		return fmt.Errorf("host %s reads as a numeric address, not a push service's name", host)
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

// ParseSubscription is Filter{AllowPrivate: allowPrivate}.ParseSubscription(token): the
// default hosts.
func ParseSubscription(token string, allowPrivate bool) (Subscription, error) {
	return Filter{AllowPrivate: allowPrivate}.ParseSubscription(token)
}

// ParseSubscription decodes and checks a subscription as a client registers it: the
// endpoint as Check does, p256dh a point on P-256 and auth 16 bytes. Errors wrap
// ErrEndpoint.
func (f Filter) ParseSubscription(token string) (Subscription, error) {
	var s Subscription
	if err := json.Unmarshal([]byte(token), &s); err != nil {
		return s, fmt.Errorf("%w: not a PushSubscription as JSON: %v", ErrEndpoint, err)
	}
	if err := f.Check(s.Endpoint); err != nil {
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
