package webpush

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// anyHost takes every host on 443, so that the address rules alone decide.
var anyHost = Filter{Hosts: []string{"*"}}

// TestAddressRules: every special-purpose range, and every way of embedding an IPv4
// address in an IPv6 one, is refused at registration (an IP literal in the endpoint) and
// at connect time (the dialer's check, after a name resolved to it), with an error that
// names what it is. The public addresses beside them pass both.
func TestAddressRules(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // a part of the error, "" for an allowed address
	}{
		// IPv4 special-purpose registry, and beside it.
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "'this network'"},
		{"10.1.2.3", "private (RFC 1918)"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"100.100.100.200", "carrier-grade NAT"}, // a cloud's metadata service
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"127.0.0.1", "loopback"},
		{"127.1.2.3", "loopback"},
		{"169.254.169.254", "link-local"},
		{"172.16.0.1", "private (RFC 1918)"},
		{"172.31.255.255", "private (RFC 1918)"},
		{"172.32.0.1", ""},
		{"192.0.0.1", "IETF protocol assignment"},
		{"192.0.0.170", "IETF protocol assignment"},
		{"192.0.1.1", ""},
		{"192.0.2.1", "TEST-NET-1"},
		{"192.31.196.1", "AS112"},
		{"192.52.193.1", "AMT"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.1.1", "private (RFC 1918)"},
		{"192.175.48.1", "AS112"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"198.51.100.7", "TEST-NET-2"},
		{"203.0.113.9", "TEST-NET-3"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved (240/4)"},
		{"255.255.255.254", "reserved (240/4)"},
		{"255.255.255.255", "reserved (240/4)"},
		{"168.63.129.16", "cloud platform"},
		{"168.63.129.17", ""},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		// IPv6 special-purpose registry.
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"100::1", "discard-only"},
		{"100:0:0:1::1", "dummy"},
		{"2001:2::1", "IETF protocol assignment"},
		{"2001:10::1", "IETF protocol assignment"},
		{"2001:1ff:ffff::1", "IETF protocol assignment"},
		{"2001:200::1", ""}, // just past 2001::/23
		{"2001:db8::1", "documentation (2001:db8::/32)"},
		{"2620:4f:8000::1", "AS112"},
		{"3fff::1", "documentation (3fff::/20)"},
		{"5f00::1", "SRv6"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fd00:ec2::254", "unique local"}, // a cloud's metadata service
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"4000::1", "reserved IPv6"},
		{"::ffff:0:a00:1", "reserved IPv6"}, // SIIT's IPv4-translated form
		{"2001:4860:4860::8888", ""},
		{"2a00:1450:4001::200a", ""},
		// IPv4-mapped: the IPv4 address decides.
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private (RFC 1918)"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:168.63.129.16", "cloud platform"},
		{"::ffff:198.18.0.1", "benchmarking"},
		{"::ffff:8.8.8.8", ""},
		// IPv4-compatible (deprecated): refused, naming a private address it embeds.
		{"::10.0.0.1", "private (RFC 1918) address (its IPv4-compatible part is 10.0.0.1)"},
		{"::127.0.0.2", "loopback address (its IPv4-compatible part is 127.0.0.2)"},
		{"::8.8.8.8", "IPv4-compatible"},
		// NAT64 well-known prefix: the IPv4 address decides (DNS64 networks use it).
		{"64:ff9b::10.0.0.1", "private (RFC 1918) address (its NAT64 part is 10.0.0.1)"},
		{"64:ff9b::127.0.0.1", "loopback address (its NAT64 part"},
		{"64:ff9b::169.254.169.254", "link-local address (its NAT64 part"},
		{"64:ff9b::8.8.8.8", ""},
		// Local-use NAT64: not global; the embedded address is named when it is private.
		{"64:ff9b:1::a00:1", "private (RFC 1918) address (its local-use NAT64 part is 10.0.0.1)"},
		{"64:ff9b:1::808:808", "local-use NAT64"},
		// 6to4: the IPv4 address is bits 16-47.
		{"2002:a00:1::1", "private (RFC 1918) address (its 6to4 part is 10.0.0.1)"},
		{"2002:7f00:1::1", "loopback address (its 6to4 part is 127.0.0.1)"},
		{"2002:c0a8:101::1", "its 6to4 part is 192.168.1.1"},
		{"2002:808:808::1", "6to4 (2002::/16)"},
		// Teredo: the client is the last 32 bits inverted (10.0.0.1 is f5ff:fffe), the
		// server bits 32-63.
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", "private (RFC 1918) address (its Teredo part is 10.0.0.1)"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback address (its Teredo part is 127.0.0.1)"},
		{"2001:0:a00:1:8000:63bf:f7f7:f7f7", "its Teredo part is 10.0.0.1"}, // a private server
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", "Teredo (2001::/32)"},      // client 8.8.8.8
	} {
		t.Run(tc.addr, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.addr)
			host := "[" + strings.Replace(ip.String(), "%", "%25", 1) + "]"
			if ip.Is4() {
				host = ip.String()
			}
			reg := anyHost.Check("https://" + host + "/push/x")
			dial := dialControl("tcp", net.JoinHostPort(tc.addr, "443"), nil)
			if tc.want == "" {
				if reg != nil || dial != nil {
					t.Errorf("%s refused: at registration %v, at connect time %v", tc.addr, reg, dial)
				}
				return
			}
			if reg == nil || !strings.Contains(reg.Error(), tc.want) || !errors.Is(reg, ErrEndpoint) {
				t.Errorf("registration of %s: %v, want ErrEndpoint about %q", tc.addr, reg, tc.want)
			}
			if dial == nil || !strings.Contains(dial.Error(), tc.want) || !errors.Is(dial, ErrForbiddenAddress) {
				t.Errorf("connect to %s: %v, want ErrForbiddenAddress about %q", tc.addr, dial, tc.want)
			}
		})
	}
}

// TestEndpointRules: the URL, port and host rules, with the default hosts and with an
// operator's list. The messages say what to fix.
func TestEndpointRules(t *testing.T) {
	custom := Filter{Hosts: []string{"push.example.com:8443", "*.push.example.net"}}
	for _, tc := range []struct {
		f        Filter
		endpoint string
		want     string // a part of the error, "" for none
	}{
		{Filter{}, "https://fcm.googleapis.com/fcm/send/abc:def", ""},
		{Filter{}, "https://fcm.googleapis.com:443/fcm/send/abc", ""},
		{Filter{}, "https://FCM.GoogleAPIs.com./fcm/send/abc", ""},
		{Filter{}, "https://updates.push.services.mozilla.com/wpush/v2/gAAAA", ""},
		{Filter{}, "https://eu.push.services.mozilla.com/wpush/v2/gAAAA", ""},
		{Filter{}, "https://wns2-by3p.notify.windows.com/w/?token=BQYAAA", ""},
		{Filter{}, "https://web.push.apple.com/QGuQyavXutnMH", ""},
		{Filter{}, "https://fcm.googleapis.com:22/fcm/send/abc", "port 22: this server sends to fcm.googleapis.com only on 443"},
		{Filter{}, "https://fcm.googleapis.com:8443/fcm/send/abc", "port 8443"},
		{Filter{}, "https://fcm.googleapis.com:0443/fcm/send/abc", "port 0443"},
		{Filter{}, "https://push.services.mozilla.com/x", "not a push service this server sends to"},
		{Filter{}, "https://evilnotify.windows.com/x", "not a push service"},
		{Filter{}, "https://fcm.googleapis.com.evil.example/x", "not a push service"},
		{Filter{}, "https://push.example.com/x", "not a push service"},
		{Filter{}, "https://8.8.8.8/push", "not a push service"},
		{Filter{}, "https://10.0.0.1/push", "private"},
		{Filter{}, "http://fcm.googleapis.com/x", "must be an https URL"},
		{Filter{}, "ftp://fcm.googleapis.com/x", "must be an https URL"},
		{Filter{}, "", "missing"},
		{Filter{}, "fcm.googleapis.com/x", "must be an https URL"},
		{Filter{}, "https:///x", "with a host"},
		{Filter{}, "https://user:pw@fcm.googleapis.com/x", "user name or password"},
		{Filter{}, "https://fcm.googleapis.com/x#frag", "fragment"},
		{Filter{}, "https://fcm.googleapis.com/" + strings.Repeat("a", 3000), "longer than"},
		{anyHost, "https://8.8.8.8/push", ""},
		{anyHost, "https://[2001:4860:4860::8888]/push", ""},
		{anyHost, "https://push.example.org/x", ""},
		{anyHost, "https://push.example.org:22/x", "port 22"},
		{anyHost, "https://localhost/x", "this machine"},
		{anyHost, "https://push.localhost./x", "this machine"},
		{anyHost, "https://127.1/x", "numeric address"},
		{anyHost, "https://0x7f.1/x", "numeric address"},
		{anyHost, "https://2130706433/x", "numeric address"},
		{custom, "https://push.example.com:8443/x", ""},
		{custom, "https://push.example.com/x", "port 443: this server sends to push.example.com only on 443 or the port its allowed hosts name"},
		{custom, "https://a.push.example.net/x", ""},
		{custom, "https://push.example.net/x", "not a push service"},
		{custom, "https://fcm.googleapis.com/x", "not a push service"},
		// AllowPrivate (tests): http, private hosts and any host or port are fine.
		{Filter{AllowPrivate: true}, "http://127.0.0.1:9999/push/x", ""},
		{Filter{AllowPrivate: true}, "https://[::1]/x", ""},
		{Filter{AllowPrivate: true}, "http://localhost:8080/x", ""},
		{Filter{AllowPrivate: true}, "ftp://127.0.0.1/x", "must be an https URL"},
		{Filter{AllowPrivate: true}, "http://u@127.0.0.1/x", "user name or password"},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			err := tc.f.Check(tc.endpoint)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%+v.Check(%q) = %v, want nil", tc.f, tc.endpoint, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%+v.Check(%q) = %v, want an error about %q", tc.f, tc.endpoint, err, tc.want)
			case err != nil && !errors.Is(err, ErrEndpoint):
				t.Errorf("%v does not wrap ErrEndpoint", err)
			}
		})
	}
}

// TestCheckHosts: the patterns an operator may give.
func TestCheckHosts(t *testing.T) {
	for _, ok := range [][]string{nil, DefaultHosts, {"*"}, {"*.example.com"}, {"push.example.com:8443", "*:443"}} {
		if err := CheckHosts(ok); err != nil {
			t.Errorf("CheckHosts(%q) = %v", ok, err)
		}
	}
	for _, bad := range [][]string{{}, {""}, {"https://push.example.com"}, {"push.example.com/x"}, {"*."},
		{"a.*.example.com"}, {"push.example.com:0"}, {"push.example.com:99999"}, {"push.example.com:https"},
		{"user@push.example.com"}, {"a..b"}} {
		if err := CheckHosts(bad); !errors.Is(err, ErrHostPattern) {
			t.Errorf("CheckHosts(%q) = %v, want ErrHostPattern", bad, err)
		}
	}
}
