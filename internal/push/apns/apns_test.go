package apns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/pushtest"
)

// newProvider starts a fake APNs and a Provider pointed at it.
func newProvider(t *testing.T) (*Provider, *pushtest.APNs) {
	t.Helper()
	fake := pushtest.NewAPNs(t)
	p, err := New(Options{KeyFile: fake.Key.Path, KeyID: fake.Key.KeyID, TeamID: fake.Key.TeamID,
		Topic: "chat.parley.app", Endpoint: fake.URL(), HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return p, fake
}

func deviceToken(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func uuid(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func target(t testing.TB) push.Target {
	return push.Target{UserID: "u1", DeviceID: "d1", Provider: push.APNs, Token: deviceToken(t)}
}

func note(i int) push.Notification {
	return push.Notification{ID: uuid(i), CollapseID: "conv-c1", ConvID: "c1", Seq: int64(i),
		Cursor: int64(100 + i), SenderID: "u2", SenderName: "Ada", Badge: 3,
		Expiration: time.Unix(1_900_000_000, 0)}
}

func TestSendDelivered(t *testing.T) {
	p, fake := newProvider(t)
	tg := target(t)
	res := p.Send(context.Background(), tg, note(1))
	if res.Outcome != push.Delivered || res.Status != http.StatusOK {
		t.Fatalf("Send = %+v, want delivered 200", res)
	}
	got := fake.Notifications()
	if len(got) != 1 {
		t.Fatalf("fake got %d notifications, want 1", len(got))
	}
	n := got[0]
	for h, want := range map[string]string{"apns-id": uuid(1), "apns-topic": "chat.parley.app",
		"apns-collapse-id": "conv-c1", "apns-push-type": "alert", "apns-priority": "10",
		"apns-expiration": "1900000000"} {
		if v := n.Header.Get(h); v != want {
			t.Errorf("%s = %q, want %q", h, v, want)
		}
	}
	if n.DeviceToken != tg.Token {
		t.Errorf("device token %q, want %q", n.DeviceToken, tg.Token)
	}
	aps := n.APS()
	alert, _ := aps["alert"].(map[string]any)
	if alert["title"] != "Ada" || alert["body"] != "New message" {
		t.Errorf("alert = %v, want title Ada, body New message", alert)
	}
	for k, want := range map[string]any{"badge": 3.0, "sound": "default", "mutable-content": 1.0,
		"thread-id": "c1"} {
		if aps[k] != want {
			t.Errorf("aps[%s] = %v, want %v", k, aps[k], want)
		}
	}
	for k, want := range note(1).Data() {
		if n.Payload[k] != want {
			t.Errorf("payload[%s] = %v, want %q", k, n.Payload[k], want)
		}
	}
}

func TestSendPreview(t *testing.T) {
	p, fake := newProvider(t)
	n := note(1)
	n.Preview = "see you at 6"
	if res := p.Send(context.Background(), target(t), n); res.Outcome != push.Delivered {
		t.Fatalf("Send = %+v", res)
	}
	got := fake.Notifications()[0]
	if body := got.APS()["alert"].(map[string]any)["body"]; body != "see you at 6" {
		t.Errorf("alert body %v, want the preview", body)
	}
	if got.Payload["preview"] != "see you at 6" {
		t.Errorf("payload preview %v", got.Payload["preview"])
	}
}

func TestSendBadgeOnly(t *testing.T) {
	p, fake := newProvider(t)
	n := push.Notification{ID: uuid(7), BadgeOnly: true, Badge: 0}
	if res := p.Send(context.Background(), target(t), n); res.Outcome != push.Delivered {
		t.Fatalf("Send = %+v", res)
	}
	got := fake.Notifications()[0]
	if got.Priority != 5 || got.CollapseID != "" || got.Header.Get("apns-expiration") != "" {
		t.Errorf("priority %d, collapse %q, expiration %q; want 5, none, none", got.Priority,
			got.CollapseID, got.Header.Get("apns-expiration"))
	}
	aps := got.APS()
	if len(aps) != 1 || aps["badge"] != 0.0 {
		t.Errorf("aps = %v, want only badge 0", aps)
	}
	if got.Payload["type"] != "badge" || got.Payload["push_id"] != uuid(7) {
		t.Errorf("payload = %v, want type badge and push_id", got.Payload)
	}
}

func TestSendFailures(t *testing.T) {
	since := time.UnixMilli(1_780_000_000_123).UTC()
	date := time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat)
	tests := []struct {
		name   string
		script func(f *pushtest.APNs, token string)
		want   push.Result
	}{
		{"503 retry-after seconds", func(f *pushtest.APNs, tok string) {
			f.Throttle(tok, http.StatusServiceUnavailable, 1, 30*time.Second)
		}, push.Result{Outcome: push.Retry, Status: 503, Reason: "ServiceUnavailable", RetryAfter: 30 * time.Second}},
		{"429 no retry-after", func(f *pushtest.APNs, tok string) {
			f.Throttle(tok, http.StatusTooManyRequests, 1, 0)
		}, push.Result{Outcome: push.Retry, Status: 429, Reason: "TooManyRequests"}},
		{"500", func(f *pushtest.APNs, tok string) {
			f.Throttle(tok, http.StatusInternalServerError, 1, 0)
		}, push.Result{Outcome: push.Retry, Status: 500, Reason: "InternalServerError"}},
		{"410 unregistered", func(f *pushtest.APNs, tok string) {
			f.Unregister(tok, since)
		}, push.Result{Outcome: push.Unregistered, Status: 410, Reason: "Unregistered", DeadSince: since}},
		{"bad device token", func(f *pushtest.APNs, tok string) {
			f.BadDeviceToken(tok)
		}, push.Result{Outcome: push.Unregistered, Status: 400, Reason: "BadDeviceToken"}},
		{"bad payload", func(f *pushtest.APNs, tok string) {
			f.Reply(tok, pushtest.APNsReply{Status: 400, Reason: "PayloadEmpty"})
		}, push.Result{Outcome: push.Rejected, Status: 400, Reason: "PayloadEmpty"}},
		{"too large", func(f *pushtest.APNs, tok string) {
			f.Reply(tok, pushtest.APNsReply{Status: 413, Reason: "PayloadTooLarge"})
		}, push.Result{Outcome: push.Rejected, Status: 413, Reason: "PayloadTooLarge"}},
		{"down", func(f *pushtest.APNs, tok string) {
			f.SetDown(true)
		}, push.Result{Outcome: push.Retry, Status: 503, Reason: "ServiceUnavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, fake := newProvider(t)
			tg := target(t)
			tt.script(fake, tg.Token)
			if got := p.Send(context.Background(), tg, note(1)); got != tt.want {
				t.Errorf("Send = %+v, want %+v", got, tt.want)
			}
			if fake.Count() != 0 {
				t.Errorf("fake accepted %d", fake.Count())
			}
		})
	}
	t.Run("503 retry-after date", func(t *testing.T) {
		p, fake := newProvider(t)
		tg := target(t)
		fake.Reply(tg.Token, pushtest.APNsReply{Status: 503, Reason: "ServiceUnavailable", RetryAfter: date, Times: 1})
		res := p.Send(context.Background(), tg, note(1))
		if res.Outcome != push.Retry || res.RetryAfter < time.Minute || res.RetryAfter > 2*time.Minute {
			t.Errorf("Send = %+v, want retry after about 2m", res)
		}
		// The script was for one request: the next one goes through.
		if res := p.Send(context.Background(), tg, note(1)); res.Outcome != push.Delivered {
			t.Errorf("second Send = %+v, want delivered", res)
		}
	})
	t.Run("down then up", func(t *testing.T) {
		p, fake := newProvider(t)
		fake.SetDown(true)
		tg := target(t)
		if res := p.Send(context.Background(), tg, note(1)); res.Outcome != push.Retry {
			t.Errorf("Send while down = %+v", res)
		}
		fake.SetDown(false)
		if res := p.Send(context.Background(), tg, note(1)); res.Outcome != push.Delivered {
			t.Errorf("Send after = %+v", res)
		}
		if fake.Count() != 1 || fake.Repeats() != 0 || fake.Requests() != 2 {
			t.Errorf("count %d repeats %d requests %d, want 1 0 2", fake.Count(), fake.Repeats(), fake.Requests())
		}
	})
}

func TestSendWrongKeyRejected(t *testing.T) {
	fake := pushtest.NewAPNs(t)
	other := pushtest.NewAPNsKey(t)
	p, err := New(Options{KeyFile: other.Path, KeyID: fake.Key.KeyID, TeamID: fake.Key.TeamID, Topic: "chat.parley.app",
		Endpoint: fake.URL(), HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Send(context.Background(), target(t), note(1))
	want := push.Result{Outcome: push.Rejected, Status: 403, Reason: "InvalidProviderToken"}
	if res != want {
		t.Errorf("Send = %+v, want %+v", res, want)
	}
}

func TestSendNetworkError(t *testing.T) {
	p, fake := newProvider(t)
	p.endpoint = "https://127.0.0.1:1" // nothing listens on port 1
	_ = fake
	res := p.Send(context.Background(), target(t), note(1))
	if res.Outcome != push.Retry || res.Status != 0 || res.Reason == "" {
		t.Errorf("Send = %+v, want retry with the error", res)
	}
}

// TestTopicIsTheServers: the apns-topic is the configured one whatever the target carries
// (a topic stored from a client by an older server, here another app's), and a provider
// without one is refused at start.
func TestTopicIsTheServers(t *testing.T) {
	p, fake := newProvider(t)
	for _, topic := range []string{"", "com.someone.else", "chat.parley.app.voip"} {
		tg := target(t)
		tg.Topic = topic
		if res := p.Send(context.Background(), tg, note(1)); res.Outcome != push.Delivered {
			t.Fatalf("Send with target topic %q = %+v", topic, res)
		}
	}
	for i, n := range fake.Notifications() {
		if n.Topic != "chat.parley.app" {
			t.Errorf("notification %d went with apns-topic %q, want the configured chat.parley.app", i, n.Topic)
		}
	}
	_, err := New(Options{KeyFile: fake.Key.Path, KeyID: fake.Key.KeyID, TeamID: fake.Key.TeamID})
	if err == nil || !strings.Contains(err.Error(), "Topic") {
		t.Errorf("New without a Topic: %v, want an error naming Topic", err)
	}
}

func TestSendConcurrent(t *testing.T) {
	p, fake := newProvider(t)
	const workers, each = 16, 25
	pushtest.SendAll(t, p, workers, each, func(int) push.Target { return target(t) }, note, fake.WaitCount)
	if fake.Repeats() != 0 || fake.Tokens() != 1 {
		t.Errorf("repeats %d, provider tokens %d; want 0 and 1", fake.Repeats(), fake.Tokens())
	}
}

func TestBearerRefresh(t *testing.T) {
	p, _ := newProvider(t)
	now := time.Now()
	p.now = func() time.Time { return now }
	first, err := p.bearer()
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(49 * time.Minute)
	if again, _ := p.bearer(); again != first {
		t.Error("token re-signed before 50 minutes")
	}
	p.expire(first) // 49 minutes old: APNs called it expired, so it goes
	now = now.Add(time.Second)
	third, _ := p.bearer()
	if third == first {
		t.Error("an expired token was kept")
	}
	p.expire(third) // brand new: APNs would refuse a replacement, so it stays
	if again, _ := p.bearer(); again != third {
		t.Error("a token younger than 20 minutes was replaced")
	}
	now = now.Add(50 * time.Minute)
	if again, _ := p.bearer(); again == third {
		t.Error("token not re-signed after 50 minutes")
	}
}

func TestNewErrors(t *testing.T) {
	key := pushtest.NewAPNsKey(t)
	for name, opts := range map[string]Options{
		"no key id":    {KeyFile: key.Path, TeamID: "T"},
		"missing file": {KeyFile: key.Path + ".gone", KeyID: "K", TeamID: "T"},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestExpiredProviderTokenIsReplaced(t *testing.T) {
	p, fake := newProvider(t)
	wall := time.Now()
	p.now = func() time.Time { return wall.Add(-61 * time.Minute) }
	if _, err := p.bearer(); err != nil { // signed with an iat APNs finds too old
		t.Fatal(err)
	}
	// Our clock says the token is 25 minutes old, APNs's that it is 61: APNs wins.
	p.now = func() time.Time { return wall.Add(-36 * time.Minute) }
	tg := target(t)
	res := p.Send(context.Background(), tg, note(1))
	if res.Outcome != push.Retry || res.Reason != "ExpiredProviderToken" {
		t.Fatalf("Send = %+v, want retry ExpiredProviderToken", res)
	}
	if res := p.Send(context.Background(), tg, note(1)); res.Outcome != push.Delivered {
		t.Fatalf("Send with a new token = %+v", res)
	}
	if fake.Tokens() != 2 {
		t.Errorf("fake saw %d provider tokens, want 2", fake.Tokens())
	}
}

// BenchmarkSend pushes b.N notifications through the fake from parallel senders, as the
// pusher's workers do; -benchtime=10000x is the 10,000-notification run.
func BenchmarkSend(b *testing.B) {
	fake := pushtest.NewAPNs(b)
	p, err := New(Options{KeyFile: fake.Key.Path, KeyID: fake.Key.KeyID, TeamID: fake.Key.TeamID, Topic: "chat.parley.app",
		Endpoint: fake.URL(), HTTPClient: fake.Client()})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(32) // many sends in flight per core: they mostly wait on the network
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		tg := target(b)
		for pb.Next() {
			if res := p.Send(context.Background(), tg, note(int(next.Add(1)))); res.Outcome != push.Delivered {
				b.Errorf("Send = %+v", res)
			}
		}
	})
	b.StopTimer()
	if fake.Count() != b.N {
		b.Errorf("fake counted %d of %d", fake.Count(), b.N)
	}
}
