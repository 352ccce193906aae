package webtest

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
)

// fakeSubscribeJS replaces PushManager's subscribe and getSubscription, before the page's
// scripts run, with ones that hand out sub (a subscription the fake push service made):
// a real browser would subscribe with its vendor's push service, which is not reachable
// from here. The options the page passed are kept in window.__pushSubscribed.
func fakeSubscribeJS(sub string) string {
	return fmt.Sprintf(`(() => {
  const sub = %s;
  const b64url = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const make = (key) => ({
    endpoint: sub.endpoint, expirationTime: null,
    options: { userVisibleOnly: true, applicationServerKey: key },
    toJSON: () => ({ endpoint: sub.endpoint, expirationTime: null, keys: sub.keys }),
    unsubscribe: async () => { localStorage.removeItem('fake.push.key'); return true; },
  });
  PushManager.prototype.subscribe = async function (opts) {
    const key = opts.applicationServerKey;
    window.__pushSubscribed = { userVisibleOnly: opts.userVisibleOnly, key: b64url(key.buffer ?? key) };
    localStorage.setItem('fake.push.key', window.__pushSubscribed.key); // the browser keeps it across pages
    return make((key.buffer ?? key).slice(0));
  };
  PushManager.prototype.getSubscription = async function () {
    const k = localStorage.getItem('fake.push.key');
    if (!k) return null;
    const bin = atob(k.replace(/-/g, '+').replace(/_/g, '/'));
    return make(Uint8Array.from(bin, (c) => c.charCodeAt(0)).buffer);
  };
})();`, sub)
}

// TestWebPushNotification: bob enables notifications in the page (permission granted
// through CDP, the subscription one of the fake push service's), closes it, alice writes;
// the server pushes to the fake, which decrypts it; handed to bob's service worker as the
// browser's push service would, it shows a notification titled by alice's name and tagged
// by the conversation, and the next message replaces it. Opened again, the page keeps
// notifications on; signing out removes the registration.
func TestWebPushNotification(t *testing.T) {
	fake := pushtest.NewWebPush(t)
	n := startNode(t, func(c *server.Config) {
		c.Push.WebPush = true
		c.Push.AllowPrivate = true // the fake listens on http://127.0.0.1
		c.Push.Content = "preview"
		c.Push.Grace = 100 * time.Millisecond
	})
	var vapid struct {
		PublicKey string `json:"public_key"`
	}
	n.api.MustDo(t, "GET", "/v1/push/vapid", "", nil, &vapid)
	if vapid.PublicKey == "" {
		t.Skip("web push test skipped: the server serves no VAPID key (GET /v1/push/vapid)")
	}
	fake.RequireVAPIDKey(vapid.PublicKey)
	bctx := newBrowser(t)
	origin := n.url()
	if _, err := chromedp.CallBrowser(bctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"},
		Setting:    browser.PermissionSettingGranted,
		Origin:     origin,
	}); err != nil {
		t.Fatalf("grant notifications: %v", err)
	}

	// Bob signs in (in the default browser context, where the permission was granted) and
	// turns notifications on with the button.
	sub := fake.NewSubscription()
	bob := newPage(t, bctx, "bob/laptop", false)
	if _, err := chromedp.Call(bob.ctx, cdppage.AddScriptToEvaluateOnNewDocument,
		cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: fakeSubscribeJS(sub)}); err != nil {
		t.Fatal(err)
	}
	bob.signIn(origin, "bob", "laptop")
	bob.waitJS("the Enable notifications button", `(() => { const b = document.getElementById('push-toggle'); return !b.hidden && b.dataset.state === 'off' && b.textContent === 'Enable notifications'; })()`)
	bob.screenshot("push-enable")
	bob.click("Enable notifications", chromedp.CSS("#push-toggle"))
	bob.waitJS("notifications on", `document.getElementById('push-toggle').dataset.state === 'on'`)
	var subscribed struct {
		UserVisibleOnly bool   `json:"userVisibleOnly"`
		Key             string `json:"key"`
	}
	bob.eval(`window.__pushSubscribed`, &subscribed)
	if !subscribed.UserVisibleOnly || subscribed.Key != vapid.PublicKey {
		t.Fatalf("subscribed with %+v, want userVisibleOnly and the server's key %s", subscribed, vapid.PublicKey)
	}
	var bobToken string
	bob.eval(`JSON.parse(sessionStorage.getItem('parley.session')).token`, &bobToken)
	var devices struct {
		Devices []struct {
			DeviceID string `json:"device_id"`
			Provider string `json:"provider"`
			Token    string `json:"token"`
		} `json:"devices"`
	}
	n.api.MustDo(t, "GET", "/v1/push/devices", bobToken, nil, &devices)
	if len(devices.Devices) != 1 || devices.Devices[0].DeviceID != "laptop" || devices.Devices[0].Provider != "webpush" ||
		devices.Devices[0].Token != fake.URL() {
		t.Fatalf("bob's push devices %+v, want laptop on webpush at %s", devices.Devices, fake.URL())
	}
	regID := bob.serviceWorker(origin + "/")

	// Bob closes the page; alice writes to him.
	if err := chromedp.Cancel(bob.ctx); err != nil {
		t.Fatalf("close bob's page: %v", err)
	}
	n.waitNoSockets() // else alice's message may still go to bob's closing socket, and not be pushed
	var alice struct{ Token string }
	n.api.MustDo(t, "POST", "/v1/dev/login", "", map[string]string{"user_id": "alice", "device_id": "cli", "name": "Alice"}, &alice)
	var conv struct {
		ConvID string `json:"conv_id"`
	}
	n.api.MustDo(t, "POST", "/v1/conversations", alice.Token, map[string]any{"type": "direct", "peer_id": "bob"}, &conv)
	n.api.MustDo(t, "POST", "/v1/messages", alice.Token, map[string]any{"conv_id": conv.ConvID, "client_msg_id": "hello-1",
		"content_type": 1, "content": map[string]string{"text": "Are you there, Bob?"}}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := fake.WaitCount(ctx, 1); err != nil {
		t.Fatalf("the push: %v (fake's errors: %v, requests %d %v)", err, fake.Errors(), fake.Requests(), fake.Statuses())
	}
	m := fake.Messages()[0]
	if m.SubscriptionID != fake.SubscriptionID(sub) || m.Data["type"] != "message" || m.Data["conv_id"] != conv.ConvID ||
		m.Data["sender_name"] != "Alice" || m.Data["preview"] != "Are you there, Bob?" || m.Topic == "" {
		t.Fatalf("pushed %+v", m)
	}

	// The push service hands it to the browser: here CDP does, with the decrypted data.
	check := newPage(t, bctx, "bob/check", false)
	check.do("open the app's origin", chromedp.Navigate(origin), chromedp.WaitVisible(chromedp.ID("dev-user")))
	if got := check.serviceWorker(origin + "/"); got != regID {
		t.Fatalf("registration %s, then %s", regID, got)
	}
	if _, err := chromedp.Call(check.ctx, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
		Origin: origin, RegistrationID: regID, Data: string(m.Payload),
	}); err != nil {
		t.Fatalf("deliver the push: %v", err)
	}
	check.waitNotifications("a notification", func(ns []notification) bool { return len(ns) > 0 })
	shown := check.notifications()
	if len(shown) != 1 || shown[0].Title != "Alice" || shown[0].Body != "Are you there, Bob?" || shown[0].Tag != conv.ConvID ||
		shown[0].Data.ConvID != conv.ConvID || shown[0].Data.Seq != 1 {
		t.Fatalf("notifications %+v, want one from Alice tagged %s", shown, conv.ConvID)
	}

	// A second message to the same conversation replaces it (same tag): a burst shows as one.
	n.api.MustDo(t, "POST", "/v1/messages", alice.Token, map[string]any{"conv_id": conv.ConvID, "client_msg_id": "hello-2",
		"content_type": 1, "content": map[string]string{"text": "Hello?"}}, nil)
	if err := fake.WaitCount(ctx, 2); err != nil {
		t.Fatalf("the second push: %v", err)
	}
	if _, err := chromedp.Call(check.ctx, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
		Origin: origin, RegistrationID: regID, Data: string(fake.Messages()[1].Payload),
	}); err != nil {
		t.Fatalf("deliver the second push: %v", err)
	}
	check.waitNotifications("the notification replaced", func(ns []notification) bool { return len(ns) == 1 && ns[0].Body == "Hello?" })

	// Bob opens the app again on the same device: notifications are still on (the
	// subscription is registered again); signing out removes it from the server.
	again := newPage(t, bctx, "bob/laptop again", false)
	if _, err := chromedp.Call(again.ctx, cdppage.AddScriptToEvaluateOnNewDocument,
		cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: fakeSubscribeJS(sub)}); err != nil {
		t.Fatal(err)
	}
	again.signIn(origin, "bob", "laptop")
	again.waitJS("notifications still on", `document.getElementById('push-toggle').dataset.state === 'on'`)
	again.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("dev-user")))
	again.waitJS("the subscription dropped", `localStorage.getItem('fake.push.key') === null`)
	n.api.MustDo(t, "GET", "/v1/push/devices", n.api.Token(t, "bob", "other"), nil, &devices)
	if len(devices.Devices) != 0 {
		t.Fatalf("after sign-out bob's push devices are %+v, want none", devices.Devices)
	}
}

// serviceWorker returns the id of the service worker registration with scope, waiting for
// it: DeliverPushMessage needs it.
func (p *page) serviceWorker(scope string) serviceworker.RegistrationID {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	events := chromedp.Events(ctx, serviceworker.WorkerRegistrationUpdated)
	if _, err := chromedp.Call(ctx, serviceworker.Enable, cdp.Empty{}); err != nil {
		p.t.Fatalf("%s: ServiceWorker.enable: %v", p.name, err)
	}
	for ev, err := range events {
		if err != nil {
			p.t.Fatalf("%s: waiting for a service worker at %s: %v", p.name, scope, err)
		}
		for _, r := range ev.Registrations {
			if r.ScopeURL == scope && !r.IsDeleted {
				return r.RegistrationID
			}
		}
	}
	p.t.Fatalf("%s: no service worker at %s", p.name, scope)
	return ""
}

// waitNoSockets waits until the server has no WebSocket open (parley_ws_connections 0).
func (n *node) waitNoSockets() {
	n.t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for {
		_, body := n.api.Do(n.t, "GET", "/metrics", "", nil)
		if regexp.MustCompile(`(?m)^parley_ws_connections 0$`).Match(body) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			n.t.Fatalf("WebSockets still open after %v", waitTimeout)
		}
	}
}

// notification is one the page's service worker shows.
type notification struct {
	Title, Body, Tag string
	Data             struct {
		ConvID string `json:"conv_id"`
		Seq    int64  `json:"seq"`
	}
}

// notifications returns the notifications the service worker of the page's origin shows.
func (p *page) notifications() []notification {
	p.t.Helper()
	var ns []notification
	p.eval(`navigator.serviceWorker.ready.then(r => r.getNotifications()).then(ns => ns.map(n => ({title: n.title, body: n.body, tag: n.tag, data: n.data})))`, &ns)
	return ns
}

// waitNotifications polls notifications until ok, failing after waitTimeout. It polls from
// Go, one evaluation a look: waitJS's in-page polling of getNotifications() sometimes
// missed a notification the next evaluation saw.
func (p *page) waitNotifications(what string, ok func([]notification) bool) {
	p.t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for {
		ns := p.notifications()
		if ok(ns) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("%s: waiting for %s: notifications %+v", p.name, what, ns)
		}
	}
}
