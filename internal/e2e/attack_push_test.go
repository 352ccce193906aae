package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
)

// storedPushDevices reads the user's registrations from the store itself (through the
// first node's Service, past the gateway and its authentication).
func storedPushDevices(t *testing.T, n *node, userID string) []string {
	t.Helper()
	ds, err := n.Service.PushDevices(context.Background(), chat.Identity{UserID: userID})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds.Devices {
		ids = append(ids, d.DeviceID)
	}
	return ids
}

// TestAttackPushRegistrationOutlivesRevoke: a user's devices register for push in a loop,
// over HTTP, while the operator revokes the user's tokens. Once the revocation has
// returned no registration remains, neither as the API shows it (to a fresh token) nor in
// the store, and every registrar ends on 401. On a server that checked the token only
// before the registration's write, a registration authenticated before the revocation
// and written after it was left behind (it would push a revoked device); several rounds
// make that interleaving near certain there.
func TestAttackPushRegistrationOutlivesRevoke(t *testing.T) {
	f := pushtest.NewFCM(t)
	n := start(t, withFCM(f))
	n.user(t, "bob")
	for round := range 10 {
		const workers = 6
		first := make(chan struct{}, workers)
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			tok := n.Token(t, "bob", fmt.Sprintf("r%d-d%d", round, i))
			wg.Go(func() {
				for k := 0; ; k++ {
					r, err := n.request("PUT", "/v1/push/device", tok, map[string]any{"provider": "fcm", "token": fmt.Sprintf("t%d", k)})
					switch {
					case err != nil:
						errs <- err
						return
					case r.status == http.StatusOK && k == 0:
						first <- struct{}{}
					case r.status == http.StatusOK, r.status == http.StatusTooManyRequests:
					case r.status == http.StatusUnauthorized:
						return
					default:
						errs <- fmt.Errorf("registration: %d %s", r.status, r.raw)
						return
					}
				}
			})
		}
		timeout := time.After(deadline)
		for range workers {
			select {
			case <-first:
			case err := <-errs:
				t.Fatal(err)
			case <-timeout:
				t.Fatal("the registrars did not register")
			}
		}
		n.ok(t, "POST", "/v1/admin/users/bob/revoke", n.AdminSecret, nil)
		if ids := storedPushDevices(t, n, "bob"); len(ids) != 0 {
			t.Fatalf("round %d: registrations %v in the store once the revocation returned", round, ids)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(deadline):
			t.Fatal("registrars with revoked tokens were not refused")
		}
		fresh := n.Token(t, "bob", "auditor")
		if list := arr(t, n.ok(t, "GET", "/v1/push/devices", fresh, nil)["devices"]); len(list) != 0 {
			t.Fatalf("round %d: GET /v1/push/devices after the revocation: %v", round, list)
		}
		if ids := storedPushDevices(t, n, "bob"); len(ids) != 0 {
			t.Fatalf("round %d: registrations %v in the store after the registrars stopped", round, ids)
		}
	}
}

// TestAttackPushRegistrationsUnbounded: one user registering ever more devices is
// stopped at the cap with a 409 that says what to do, also when the registrations come
// at once; replacing a registered device's is not a new one, and removing one makes room.
func TestAttackPushRegistrationsUnbounded(t *testing.T) {
	f := pushtest.NewFCM(t)
	const maxDevices, devices = 4, 16
	n := start(t, withFCM(f), func(c *server.Config) { c.Chat.MaxPushDevices = maxDevices })
	n.user(t, "bob")
	tokens := make([]string, devices)
	for i := range tokens {
		tokens[i] = n.Token(t, "bob", fmt.Sprintf("d%02d", i))
	}
	var ok, conflict atomic.Int32
	var wg sync.WaitGroup
	for i, tok := range tokens {
		wg.Go(func() {
			r, err := n.request("PUT", "/v1/push/device", tok, map[string]any{"provider": "fcm", "token": fmt.Sprintf("t%d", i)})
			switch {
			case err != nil:
				t.Error(err)
			case r.status == http.StatusOK:
				ok.Add(1)
			case r.status == http.StatusConflict:
				conflict.Add(1)
				var e struct{ Error string }
				_ = json.Unmarshal(r.raw, &e)
				if !strings.Contains(e.Error, "DELETE /v1/push/devices/{device_id}") || !strings.Contains(e.Error, fmt.Sprint(maxDevices)) {
					t.Errorf("over the cap: %s, want the cap and how to make room", r.raw)
				}
			default:
				t.Errorf("registration: %d %s", r.status, r.raw)
			}
		})
	}
	wg.Wait()
	if ok.Load() != maxDevices || conflict.Load() != devices-maxDevices {
		t.Fatalf("%d registered and %d refused with 409, want %d and %d", ok.Load(), conflict.Load(), maxDevices, devices-maxDevices)
	}
	list := arr(t, n.ok(t, "GET", "/v1/push/devices", tokens[0], nil)["devices"])
	if len(list) != maxDevices {
		t.Fatalf("%d devices listed, want %d", len(list), maxDevices)
	}
	// At the cap: a registered device replaces its registration; a new one is refused
	// until one is removed.
	in := list[0]["device_id"].(string)
	var inTok, outTok string
	for i, tok := range tokens {
		id := fmt.Sprintf("d%02d", i)
		if id == in {
			inTok = tok
		} else if !strings.Contains(fmt.Sprint(list), id) {
			outTok = tok
		}
	}
	n.ok(t, "PUT", "/v1/push/device", inTok, map[string]any{"provider": "fcm", "token": "replaced"})
	n.fail(t, http.StatusConflict, "PUT", "/v1/push/device", outTok, map[string]any{"provider": "fcm", "token": "new"})
	n.ok(t, "DELETE", "/v1/push/devices/"+in, outTok, nil)
	n.ok(t, "PUT", "/v1/push/device", outTok, map[string]any{"provider": "fcm", "token": "new"})
	if got := len(storedPushDevices(t, n, "bob")); got != maxDevices {
		t.Fatalf("%d registrations stored, want %d", got, maxDevices)
	}
}

// TestAttackPushEndpointFilter: a client registers Web Push endpoints that would make the
// server call into its own network or any port: each is refused with a 400 that says why,
// and nothing is stored. The addresses are those that got through before: NAT64, IPv4-
// compatible, 6to4 and Teredo addresses embedding private ones, the benchmarking, IETF and
// documentation ranges, 240/4, a cloud's internal service address, and port 22. A real
// browser's endpoint, on an allowed push service, is accepted.
func TestAttackPushEndpointFilter(t *testing.T) {
	n := start(t)
	bob := n.user(t, "bob")
	var sub map[string]any
	if err := json.Unmarshal([]byte(pushtest.NewWebPush(t).NewSubscription()), &sub); err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]string{
		"https://[64:ff9b::a00:1]/push":                          "its NAT64 part is 10.0.0.1",
		"https://[64:ff9b::7f00:1]/push":                         "its NAT64 part is 127.0.0.1",
		"https://[64:ff9b:1::a9fe:a9fe]/push":                    "its local-use NAT64 part is 169.254.169.254",
		"https://[::a00:1]/push":                                 "its IPv4-compatible part is 10.0.0.1",
		"https://[2002:c0a8:101::1]/push":                        "its 6to4 part is 192.168.1.1",
		"https://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/push":    "its Teredo part is 10.0.0.1",
		"https://198.18.0.1/push":                                "benchmarking",
		"https://192.0.0.170/push":                               "IETF protocol assignment",
		"https://192.0.2.1/push":                                 "TEST-NET-1",
		"https://198.51.100.1/push":                              "TEST-NET-2",
		"https://203.0.113.1/push":                               "TEST-NET-3",
		"https://240.0.0.1/push":                                 "reserved (240/4)",
		"https://168.63.129.16/push":                             "cloud platform",
		"https://[::ffff:a9fe:a9fe]/latest/meta-data":            "link-local",
		"https://fcm.googleapis.com:22/fcm/send/x":               "port 22",
		"https://push.attacker.example/x":                        "not a push service this server sends to",
		"https://fcm.googleapis.com.attacker.example/fcm/send/x": "not a push service",
	} {
		sub["endpoint"] = ep
		r := n.fail(t, http.StatusBadRequest, "PUT", "/v1/push/device", bob, map[string]any{"provider": "webpush", "subscription": sub})
		if !strings.Contains(string(r.raw), want) {
			t.Errorf("endpoint %s: %s, want %q", ep, r.raw, want)
		}
	}
	if ids := storedPushDevices(t, n, "bob"); len(ids) != 0 {
		t.Fatalf("refused endpoints stored: %v", ids)
	}
	sub["endpoint"] = "https://fcm.googleapis.com/fcm/send/dGVzdA:APA91b"
	reg := n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "webpush", "subscription": sub})
	wantFields(t, "registration", reg, map[string]any{"provider": "webpush", "token": "https://fcm.googleapis.com"})
}
