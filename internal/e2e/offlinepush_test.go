package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/protocol"
)

// withFCM points the node's FCM provider at the fake, with a short grace period so that
// a device that just went offline is pushed soon.
func withFCM(f *pushtest.FCM) func(*server.Config) {
	return func(c *server.Config) {
		c.Push.FCMCredentials, c.Push.FCMEndpoint, c.Push.HTTPClient = f.CredentialsFile(), f.URL(), f.Client()
		c.Push.Grace = 200 * time.Millisecond
	}
}

func waitCount(t *testing.T, what string, wait func(context.Context, int) error, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := wait(ctx, n); err != nil {
		t.Fatalf("waiting for %d %s: %v", n, what, err)
	}
}

// TestPushOfflineOnlineMuted runs the pusher through a real node and the fake FCM: an
// offline device gets one push per message with the conversation, seq, sender's name and
// badge and no content; a device connected by WebSocket gets none; a muted conversation
// pushes nothing and leaves the badge; a read on another device sends a badge-only push.
func TestPushOfflineOnlineMuted(t *testing.T) {
	parleytest.OneNode(t, "the fake's counts are per node; the cluster's pusher is covered by TestPushCluster")
	f := pushtest.NewFCM(t)
	n := start(t, withFCM(f))
	alice := n.user(t, "alice")
	n.expect(t, 201, "POST", "/v1/admin/users", n.AdminSecret, map[string]any{"user_id": "bob", "name": "Bob"})
	bob := n.Token(t, "bob", "phone")
	reg := n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "fcm-token-of-bobs-phone", "locale": "en-GB"})
	wantFields(t, "registration", reg, map[string]any{"device_id": "phone", "provider": "fcm", "token": "…bs-phone", "locale": "en-GB"})
	d := n.direct(t, alice, "bob")["conv_id"].(string)

	// Offline: pushed, without content.
	n.send(t, alice, d, "m1")
	waitCount(t, "pushes", f.WaitCount, 1)
	m := f.Messages()[0]
	if m.Token != "fcm-token-of-bobs-phone" || m.Data["conv_id"] != d || m.Data["seq"] != "1" || m.Data["sender_id"] != "alice" ||
		m.Data["badge"] != "1" || m.Data["type"] != "message" || m.Data["preview"] != "" || m.Data["push_id"] == "" {
		t.Fatalf("push %+v", m)
	}

	// Online on a WebSocket: the message arrives there and is not pushed.
	ws := n.dial(t, bob, n.latest(t, bob))
	n.send(t, alice, d, "m2")
	if ev := ws.event(); ev["type"] != "message" {
		t.Fatalf("pushed %v", ev)
	}
	ws.conn.Close()
	// Offline again: the next message is the second push.
	n.send(t, alice, d, "m3")
	waitCount(t, "pushes", f.WaitCount, 2)
	if m := f.Messages()[1]; m.Data["seq"] != "3" || m.Data["badge"] != "3" {
		t.Fatalf("second push %+v, want seq 3 (seq 2 was taken live)", m.Data)
	}

	// Muted: nothing, and the badge leaves the conversation out.
	mute := n.ok(t, "PUT", "/v1/conversations/"+d+"/mute", bob, map[string]any{})
	wantFields(t, "mute", mute, map[string]any{"conv_id": d, "muted_until": float64(protocol.MuteForever)})
	n.send(t, alice, d, "m4")
	carol := n.user(t, "carol")
	g := n.group(t, carol, "G", false, "bob")["conv_id"].(string)
	n.send(t, carol, g, "g1")
	waitCount(t, "pushes", f.WaitCount, 3)
	if m := f.Messages()[2]; m.Data["conv_id"] != g || m.Data["badge"] != "1" {
		t.Fatalf("third push %+v, want the group's message with badge 1 (the muted direct's 4 left out)", m.Data)
	}
	n.ok(t, "DELETE", "/v1/conversations/"+d+"/mute", bob, nil)
	if st := n.ok(t, "GET", "/v1/conversations/"+d+"/mute", bob, nil); num(st["muted_until"]) != 0 {
		t.Fatalf("after unmute: %v", st)
	}

	// Read on the laptop: the phone's badge is updated by a silent push.
	laptop := n.Token(t, "bob", "laptop")
	n.ok(t, "POST", "/v1/conversations/"+g+"/read", laptop, map[string]any{"seq": 1})
	waitCount(t, "pushes", f.WaitCount, 4)
	if m := f.Messages()[3]; m.Data["type"] != "badge" || m.Data["badge"] != "4" || m.Android.Priority != "NORMAL" {
		t.Fatalf("badge push %+v, want type badge with the direct's 4 unread", m)
	}
	if f.Repeats() != 0 {
		t.Fatalf("%d pushes repeated", f.Repeats())
	}
}

// TestPushRegistrations covers the registration calls and their errors.
func TestPushRegistrations(t *testing.T) {
	f := pushtest.NewFCM(t)
	n := start(t, withFCM(f))
	bob := n.user(t, "bob")
	tablet := n.Token(t, "bob", "tablet")
	n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "t1"})
	n.ok(t, "PUT", "/v1/push/device", tablet, map[string]any{"provider": "fcm", "token": "t2"})
	n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "t1-new"}) // replaces
	list := arr(t, n.ok(t, "GET", "/v1/push/devices", bob, nil)["devices"])
	if len(list) != 2 || list[0]["device_id"] != "d1" || list[0]["token"] != "t1-new" || list[1]["device_id"] != "tablet" {
		t.Fatalf("devices %v", list)
	}
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"provider": "hms", "token": "x"}, "provider must be apns, fcm or webpush"},
		{map[string]any{"provider": "fcm"}, "provider fcm takes a token"},
		{map[string]any{"provider": "apns", "token": "ab", "topic": "com.example"}, "provider apns is not configured"},
		{map[string]any{"provider": "fcm", "token": "x", "topic": "t"}, "topic is only for provider apns"},
		{map[string]any{"provider": "fcm", "token": "a\nb"}, "printable"},
	} {
		r := n.fail(t, 400, "PUT", "/v1/push/device", bob, c.body)
		if !strings.Contains(string(r.raw), c.want) {
			t.Errorf("%v: %s, want %q", c.body, r.raw, c.want)
		}
	}
	// A Web Push endpoint must be a public https push service, not a host of the
	// server's network (the server would call it).
	var sub map[string]any
	if err := json.Unmarshal([]byte(pushtest.NewWebPush(t).NewSubscription()), &sub); err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]string{
		sub["endpoint"].(string):   "must be an https URL",
		"https://127.0.0.1:9/push": "loopback",
		"https://10.1.2.3/push":    "private",
		"https://[fd00::1]/push":   "unique local",
		"https://169.254.169.254/": "link-local",
	} {
		sub["endpoint"] = ep
		r := n.fail(t, 400, "PUT", "/v1/push/device", bob, map[string]any{"provider": "webpush", "subscription": sub})
		if !strings.Contains(string(r.raw), want) {
			t.Errorf("endpoint %s: %s, want %q", ep, r.raw, want)
		}
	}
	n.ok(t, "DELETE", "/v1/push/devices/tablet", bob, nil)
	n.fail(t, 404, "DELETE", "/v1/push/devices/tablet", bob, nil)
	n.ok(t, "DELETE", "/v1/push/device", bob, nil)
	if list := arr(t, n.ok(t, "GET", "/v1/push/devices", bob, nil)["devices"]); len(list) != 0 {
		t.Fatalf("after removing both: %v", list)
	}
	// Revoking the user's tokens removes every registration.
	n.ok(t, "PUT", "/v1/push/device", tablet, map[string]any{"provider": "fcm", "token": "t2"})
	n.ok(t, "POST", "/v1/admin/users/bob/revoke", n.AdminSecret, nil)
	bob = n.Token(t, "bob", "d1")
	if list := arr(t, n.ok(t, "GET", "/v1/push/devices", bob, nil)["devices"]); len(list) != 0 {
		t.Fatalf("after revocation: %v", list)
	}
	// Mute needs membership.
	n.fail(t, 404, "PUT", "/v1/conversations/d_nosuchconversationxxxxxxxxx/mute", bob, map[string]any{})
}

// TestPushTestCommand is the admin call behind `parley push test`.
func TestPushTestCommand(t *testing.T) {
	f := pushtest.NewFCM(t)
	n := start(t, withFCM(f))
	bob := n.user(t, "bob")
	n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "t1"})
	f.Unregister("t1")
	res := arr(t, n.ok(t, "POST", "/v1/admin/users/bob/push-test", n.AdminSecret, nil)["results"])
	if len(res) != 1 || res[0]["device_id"] != "d1" || res[0]["outcome"] != "unregistered" || num(res[0]["status"]) != 404 {
		t.Fatalf("push test: %v", res)
	}
}

// TestPushRetryAndDeadToken: the fake FCM answers 503 with Retry-After, then accepts, and
// the push arrives once; then it says UNREGISTERED and the registration is removed.
func TestPushRetryAndDeadToken(t *testing.T) {
	parleytest.OneNode(t, "reads the node's metrics")
	f := pushtest.NewFCM(t)
	n := start(t, withFCM(f))
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "t1"})
	d := n.direct(t, alice, "bob")["conv_id"].(string)
	f.Throttle("t1", 503, 2, time.Second)
	n.send(t, alice, d, "m1")
	waitCount(t, "pushes", f.WaitCount, 1)
	if f.Requests() != 3 || f.Repeats() != 0 {
		t.Fatalf("%d requests, %d repeats: want 2 refused then 1 accepted", f.Requests(), f.Repeats())
	}
	if r := n.metric(t, `parley_push_retried_total{provider="fcm"}`); r != 2 {
		t.Fatalf("retried %v", r)
	}
	f.Unregister("t1")
	n.send(t, alice, d, "m2")
	eventually(t, "the dead registration removed", func() bool {
		return n.metric(t, `parley_push_tokens_removed_total{provider="fcm",reason="UNREGISTERED"}`) == 1
	})
	if list := arr(t, n.ok(t, "GET", "/v1/push/devices", bob, nil)["devices"]); len(list) != 0 {
		t.Fatalf("after UNREGISTERED: %v", list)
	}
}

// TestPushAPNs: the fake APNs (HTTP/2, JWT checked) gets the alert with the thread and
// collapse ids, under the configured topic whatever topic the client sent; a 410 with a
// timestamp removes the registration.
func TestPushAPNs(t *testing.T) {
	parleytest.OneNode(t, "reads the node's metrics")
	f := pushtest.NewAPNs(t)
	n := start(t, func(c *server.Config) {
		c.Push.APNsKeyFile, c.Push.APNsKeyID, c.Push.APNsTeamID = f.Key.Path, f.Key.KeyID, f.Key.TeamID
		c.Push.APNsTopic = "com.example.chat"
		c.Push.APNsEndpoint, c.Push.HTTPClient, c.Push.Content = f.URL(), f.Client(), "preview"
	})
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	const tok = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	// A client naming another app's topic (the team's key signs for all its apps) is
	// ignored: the registration shows none, and the push goes under the server's.
	reg := n.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "apns", "token": tok, "topic": "com.example.other-app"})
	if _, ok := reg["topic"]; ok {
		t.Fatalf("registration %v shows the client's topic", reg)
	}
	d := n.direct(t, alice, "bob")["conv_id"].(string)
	n.ok(t, "POST", "/v1/messages", alice, map[string]any{"conv_id": d, "client_msg_id": "m1", "content_type": 1, "content": map[string]any{"text": "hello bob"}})
	waitCount(t, "pushes", f.WaitCount, 1)
	got := f.Notifications()[0]
	aps := got.APS()
	if got.Header.Get("apns-topic") != "com.example.chat" || got.Header.Get("apns-collapse-id") == "" || aps["thread-id"] != d ||
		fmt.Sprint(aps["mutable-content"]) != "1" || fmt.Sprint(aps["badge"]) != "1" {
		t.Fatalf("apns push %v %v", got.Header, got.Payload)
	}
	if alert, _ := aps["alert"].(map[string]any); alert["body"] != "hello bob" {
		t.Fatalf("alert %v, want the preview", aps["alert"])
	}
	f.Unregister(tok, time.Now())
	n.send(t, alice, d, "m2")
	eventually(t, "the dead registration removed", func() bool {
		return n.metric(t, `parley_push_tokens_removed_total{provider="apns",reason="Unregistered"}`) == 1
	})
}
