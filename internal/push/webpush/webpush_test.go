package webpush_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/push/webpush"
)

// newProvider returns a provider that may reach the fake on 127.0.0.1, and its VAPID
// public key; the fake requires that key, as a real service does.
func newProvider(t *testing.T, f *pushtest.WebPush) (*webpush.Provider, string) {
	t.Helper()
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	f.RequireVAPIDKey(pub)
	p, err := webpush.New(webpush.Options{
		VAPIDPublicKey:  pub,
		VAPIDPrivateKey: priv,
		Subscriber:      "mailto:ops@example.com",
		AllowPrivate:    true,
		HTTPClient:      webpush.NewHTTPClient(true, f.TLSConfig()),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, pub
}

func notification(id string) push.Notification {
	return push.Notification{
		ID:         id,
		CollapseID: "c_general",
		ConvID:     "c_general",
		Seq:        42,
		Cursor:     1042,
		SenderID:   "bob",
		SenderName: "Bob",
		Badge:      3,
		Preview:    "hello there",
		Expiration: time.Now().Add(time.Hour),
	}
}

func target(token string) push.Target {
	return push.Target{UserID: "alice", DeviceID: "d1", Provider: push.WebPush, Token: token}
}

// TestSendRoundTrip sends through the fake, which checks the VAPID token and the headers
// and decrypts the body: what arrives is the JSON of Notification.Data(), with the Topic,
// Urgency and TTL the notification asks for. Over plain HTTP and over TLS.
func TestSendRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		fake func(testing.TB) *pushtest.WebPush
	}{{"http", pushtest.NewWebPush}, {"tls", pushtest.NewWebPushTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fake(t)
			p, pub := newProvider(t, f)
			sub := f.NewSubscription()
			n := notification("7f9c0e4e-1c7a-4b59-9a57-3a3f0d1e2b11")
			res := p.Send(context.Background(), target(sub), n)
			if res.Outcome != push.Delivered || res.Status != http.StatusCreated {
				t.Fatalf("Send = %+v, want delivered 201", res)
			}
			badge := push.Notification{ID: "8a1d", CollapseID: "badge", Badge: 0, BadgeOnly: true}
			if res := p.Send(context.Background(), target(sub), badge); res.Outcome != push.Delivered {
				t.Fatalf("Send(badge) = %+v", res)
			}
			if errs := f.Errors(); len(errs) > 0 {
				t.Fatalf("fake refused pushes: %v", errs)
			}
			msgs := f.Messages()
			if len(msgs) != 2 {
				t.Fatalf("%d messages, want 2", len(msgs))
			}
			m := msgs[0]
			if !maps.Equal(m.Data, n.Data()) {
				t.Errorf("decrypted %s, want %v", m.Payload, n.Data())
			}
			if m.SubscriptionID != f.SubscriptionID(sub) || m.VAPIDKey != pub || m.Subject != "mailto:ops@example.com" {
				t.Errorf("subscription %q key %q subject %q", m.SubscriptionID, m.VAPIDKey, m.Subject)
			}
			if m.Topic != "c_general" || m.Urgency != "high" || m.TTL < 3590 || m.TTL > 3600 {
				t.Errorf("Topic %q Urgency %q TTL %d, want c_general, high, about 3600", m.Topic, m.Urgency, m.TTL)
			}
			b := msgs[1]
			if b.Urgency != "normal" || b.Data["type"] != "badge" || b.Data["badge"] != "0" ||
				b.TTL != int(webpush.DefaultTTL/time.Second) {
				t.Errorf("badge push: Urgency %q TTL %d data %v", b.Urgency, b.TTL, b.Data)
			}
			if f.Count() != 2 || f.Repeats() != 0 {
				t.Errorf("Count %d Repeats %d, want 2 0", f.Count(), f.Repeats())
			}
		})
	}
}

// TestSendRetry: 429 and 5xx are Retry with the Retry-After the service gave, in seconds or
// as an HTTP date; a service that is down is Retry until it is back.
func TestSendRetry(t *testing.T) {
	f := pushtest.NewWebPush(t)
	p, _ := newProvider(t, f)
	sub := target(f.NewSubscription())
	ctx := context.Background()

	f.FailNext(1, http.StatusServiceUnavailable, "7")
	if r := p.Send(ctx, sub, notification("a")); r.Outcome != push.Retry || r.Status != 503 || r.RetryAfter != 7*time.Second {
		t.Errorf("503 Retry-After 7: %+v", r)
	}
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	f.FailNext(1, http.StatusTooManyRequests, date)
	if r := p.Send(ctx, sub, notification("a")); r.Outcome != push.Retry || r.Status != 429 ||
		r.RetryAfter < 80*time.Second || r.RetryAfter > 91*time.Second {
		t.Errorf("429 Retry-After %s: %+v", date, r)
	}
	f.FailNext(1, http.StatusInternalServerError, "")
	if r := p.Send(ctx, sub, notification("a")); r.Outcome != push.Retry || r.RetryAfter != 0 {
		t.Errorf("500: %+v", r)
	}
	f.SetDown(true)
	for range 3 {
		if r := p.Send(ctx, sub, notification("a")); r.Outcome != push.Retry || r.Status != 503 {
			t.Errorf("down: %+v", r)
		}
	}
	f.SetDown(false)
	if r := p.Send(ctx, sub, notification("a")); r.Outcome != push.Delivered {
		t.Errorf("back up: %+v", r)
	}
	if f.Count() != 1 || f.Requests() != 7 {
		t.Errorf("Count %d Requests %d, want 1 7", f.Count(), f.Requests())
	}
}

// TestSendRetryAfterCap: a Retry-After far beyond push.MaxRetryAfter, in seconds or as a
// date, comes back clamped to it, the cap every provider shares.
func TestSendRetryAfterCap(t *testing.T) {
	f := pushtest.NewWebPush(t)
	p, _ := newProvider(t, f)
	sub := target(f.NewSubscription())
	for name, header := range map[string]string{
		"seconds": "99999999999",
		"date":    time.Now().Add(30 * 24 * time.Hour).UTC().Format(http.TimeFormat),
	} {
		t.Run(name, func(t *testing.T) {
			f.FailNext(1, http.StatusTooManyRequests, header)
			if r := p.Send(context.Background(), sub, notification("a")); r.Outcome != push.Retry || r.RetryAfter != push.MaxRetryAfter {
				t.Errorf("429 Retry-After %s: %+v, want Retry after %v", header, r, push.MaxRetryAfter)
			}
		})
	}
}

// TestSendUnregistered: 410 (the user revoked permission) and 404 (an expired or unknown
// subscription) are Unregistered; so is a token that is no subscription at all.
func TestSendUnregistered(t *testing.T) {
	f := pushtest.NewWebPush(t)
	p, _ := newProvider(t, f)
	for _, status := range []int{http.StatusGone, http.StatusNotFound} {
		sub := f.NewSubscription()
		f.Unsubscribe(sub, status)
		if r := p.Send(context.Background(), target(sub), notification("a")); r.Outcome != push.Unregistered || r.Status != status {
			t.Errorf("%d: %+v", status, r)
		}
	}
	for _, token := range []string{"", "{}", `{"endpoint":"http://127.0.0.1/push/x","keys":{"p256dh":"AAAA","auth":"AAAA"}}`} {
		if r := p.Send(context.Background(), target(token), notification("a")); r.Outcome != push.Unregistered || r.Status != 0 {
			t.Errorf("token %q: %+v", token, r)
		}
	}
}

// TestSendRejected: 400, 401, 403 and 413 are Rejected, and so is a redirect, which is not
// followed (it could lead to an internal host).
func TestSendRejected(t *testing.T) {
	f := pushtest.NewWebPush(t) // only for subscriptions: the answers come from srv
	var followed sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/internal") {
			followed.Store(r.URL.Path, true)
			return
		}
		var status int
		_, _ = fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &status)
		if status/100 == 3 {
			http.Redirect(w, r, "/internal", status)
			return
		}
		http.Error(w, "no: "+http.StatusText(status), status)
	}))
	t.Cleanup(srv.Close)
	p, _ := newProvider(t, f)
	for _, status := range []int{400, 401, 403, 413, 301, 307} {
		sub := strings.Replace(f.NewSubscription(), f.URL()+"/push/", fmt.Sprintf("%s/%d/", srv.URL, status), 1)
		r := p.Send(context.Background(), target(sub), notification("a"))
		if r.Outcome != push.Rejected || r.Status != status || r.Reason == "" {
			t.Errorf("%d: %+v", status, r)
		}
	}
	followed.Range(func(k, _ any) bool { t.Errorf("redirect to %s followed", k); return true })
}

// TestDialerRefusesPrivateAddresses: a name that passed registration but resolves to a
// loopback address when the provider connects (DNS rebinding; here "localhost") is refused
// by the dialer before anything is sent, and the push is Rejected, not retried.
func TestDialerRefusesPrivateAddresses(t *testing.T) {
	f := pushtest.NewWebPush(t)
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	p, err := webpush.New(webpush.Options{
		VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subscriber: "https://parley.example/contact",
		AllowPrivate: true,                              // the registration-time check lets it through…
		HTTPClient:   webpush.NewHTTPClient(false, nil), // …the production dialer does not
	})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.URL(), "http://"))
	sub := strings.Replace(f.NewSubscription(), f.URL(), "http://localhost:"+port, 1)
	r := p.Send(context.Background(), target(sub), notification("a"))
	if r.Outcome != push.Rejected || !strings.Contains(r.Reason, "loopback") {
		t.Errorf("Send to localhost = %+v, want rejected for a loopback address", r)
	}
	if n := f.Requests(); n != 0 {
		t.Errorf("the fake got %d requests", n)
	}

	c := webpush.NewHTTPClient(false, nil)
	for _, u := range []string{f.URL(), "http://localhost:" + port, "http://[::ffff:127.0.0.1]:" + port} {
		resp, err := c.Post(u+"/push/x", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, webpush.ErrForbiddenAddress) {
			t.Errorf("POST %s: %v, want ErrForbiddenAddress", u, err)
		}
	}
	// With allowPrivate the same client reaches it.
	resp, err := webpush.NewHTTPClient(true, nil).Post(f.URL()+"/push/x", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestParseSubscription checks the keys as well as the endpoint.
func TestParseSubscription(t *testing.T) {
	f := pushtest.NewWebPush(t)
	good := f.NewSubscription()
	if _, err := webpush.ParseSubscription(good, true); err != nil {
		t.Fatalf("fake's subscription: %v", err)
	}
	if _, err := webpush.ParseSubscription(good, false); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("http endpoint without allowPrivate: %v", err)
	}
	p, _ := newProvider(t, f)
	if err := p.Validate(good); err != nil {
		t.Errorf("Validate with AllowPrivate: %v", err)
	}
	if err := p.Validate(`{"endpoint":"https://push.example.com/x"}`); !errors.Is(err, webpush.ErrEndpoint) {
		t.Errorf("Validate without keys: %v", err)
	}
	for _, tc := range []struct{ token, want string }{
		{`not json`, "not a PushSubscription"},
		{`{"endpoint":"https://push.example.com/x","keys":{"p256dh":"!!","auth":"AAAAAAAAAAAAAAAAAAAAAA"}}`, "keys.p256dh"},
		{`{"endpoint":"https://push.example.com/x","keys":{"p256dh":"BAAA","auth":"AAAAAAAAAAAAAAAAAAAAAA"}}`, "keys.p256dh"},
		{strings.Replace(good, `"auth":"`, `"auth":"AAAA`, 1), "keys.auth"},
	} {
		if _, err := webpush.ParseSubscription(tc.token, true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSubscription(%.60s) = %v, want an error about %s", tc.token, err, tc.want)
		}
	}
}

// TestNewOptions: keys that do not match or a subscriber that is no contact are refused.
func TestNewOptions(t *testing.T) {
	pub, priv, _ := webpush.GenerateVAPIDKeys()
	pub2, _, _ := webpush.GenerateVAPIDKeys()
	for _, tc := range []struct {
		name string
		o    webpush.Options
		ok   bool
	}{
		{"mailto", webpush.Options{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subscriber: "mailto:a@b.c"}, true},
		{"https", webpush.Options{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subscriber: "https://b.c/"}, true},
		{"bare address", webpush.Options{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subscriber: "a@b.c"}, false},
		{"no subscriber", webpush.Options{VAPIDPublicKey: pub, VAPIDPrivateKey: priv}, false},
		{"other public key", webpush.Options{VAPIDPublicKey: pub2, VAPIDPrivateKey: priv, Subscriber: "mailto:a@b.c"}, false},
		{"swapped", webpush.Options{VAPIDPublicKey: priv, VAPIDPrivateKey: pub, Subscriber: "mailto:a@b.c"}, false},
		{"empty", webpush.Options{Subscriber: "mailto:a@b.c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := webpush.New(tc.o)
			if (err == nil) != tc.ok {
				t.Fatalf("New = %v, want ok %v", err, tc.ok)
			}
			if p != nil && p.PublicKey() != pub {
				t.Errorf("PublicKey %q", p.PublicKey())
			}
		})
	}
}

// TestSendConcurrent: one provider from many goroutines, many subscriptions, over TLS; every
// push arrives once, and a repeat of one push_id counts as a repeat.
func TestSendConcurrent(t *testing.T) {
	workers, perWorker := 32, 20
	if raceDetector {
		workers, perWorker = 16, 10
	}
	f := pushtest.NewWebPushTLS(t)
	p, _ := newProvider(t, f)
	subs := make([]string, workers)
	for i := range subs {
		subs[i] = f.NewSubscription()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan string, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				r := p.Send(ctx, target(subs[w]), notification(fmt.Sprintf("%d-%d", w, i)))
				if r.Outcome != push.Delivered {
					errs <- fmt.Sprintf("%d-%d: %+v", w, i, r)
				}
			}
		})
	}
	if err := f.WaitCount(ctx, workers*perWorker); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r := p.Send(ctx, target(subs[0]), notification("0-0")); r.Outcome != push.Delivered {
		t.Fatalf("repeat: %+v", r)
	}
	if c, rep := f.Count(), f.Repeats(); c != workers*perWorker || rep != 1 {
		t.Errorf("Count %d Repeats %d, want %d 1", c, rep, workers*perWorker)
	}
	if errs := f.Errors(); len(errs) > 0 {
		t.Errorf("fake refused: %v", errs[0])
	}
}

// TestSendDeadlineCoversTheBody: an endpoint that answers its status at once and then drips
// the body holds Send only until the context's deadline (the pusher's SendTimeout), for a
// 201 as for a 503; without it the drain of the body would wait for as long as the drip.
func TestSendDeadlineCoversTheBody(t *testing.T) {
	for _, c := range []struct {
		status int
		want   push.Outcome
	}{{http.StatusCreated, push.Delivered}, {http.StatusServiceUnavailable, push.Retry}} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			d := pushtest.NewDrip(t, c.status, 1)
			p, _ := newProvider(t, pushtest.NewWebPush(t))
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan push.Result, 1)
			go func() { done <- p.Send(ctx, target(d.Subscription()), notification("n1")) }()
			var res push.Result
			select {
			case res = <-done:
			case <-time.After(10 * time.Second): // a bound on failure: the drip never ends by itself
				d.Release()
				t.Fatal("Send outlived its context's deadline while the body dripped")
			}
			if res.Outcome != c.want || res.Status != c.status {
				t.Fatalf("Send = %+v, want %v with status %d", res, c.want, c.status)
			}
			if _, _, total := d.Counts(); total != 1 {
				t.Fatalf("%d requests, want 1", total)
			}
		})
	}
}
