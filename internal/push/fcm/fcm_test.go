package fcm

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/pushtest"
)

// newProvider starts a fake FCM and a Provider pointed at it.
func newProvider(t *testing.T) (*Provider, *pushtest.FCM) {
	t.Helper()
	fake := pushtest.NewFCM(t)
	p, err := New(Options{CredentialsFile: fake.CredentialsFile(), Endpoint: fake.URL(),
		HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return p, fake
}

func target(i int) push.Target {
	return push.Target{UserID: "u1", DeviceID: "d1", Provider: push.FCM,
		Token: fmt.Sprintf("fcm-token-%d:APA91b", i)}
}

func note(i int) push.Notification {
	return push.Notification{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), CollapseID: "conv-c1",
		ConvID: "c1", Seq: int64(i), Cursor: int64(100 + i), SenderID: "u2", SenderName: "Ada",
		Badge: 3, Expiration: time.Now().Add(time.Hour)}
}

func TestSendDelivered(t *testing.T) {
	p, fake := newProvider(t)
	if res := p.Send(context.Background(), target(1), note(1)); res.Outcome != push.Delivered || res.Status != 200 {
		t.Fatalf("Send = %+v, want delivered 200", res)
	}
	got := fake.Messages()
	if len(got) != 1 {
		t.Fatalf("fake got %d messages, want 1", len(got))
	}
	m := got[0]
	if m.Token != target(1).Token {
		t.Errorf("token %q", m.Token)
	}
	want := note(1).Data()
	if len(m.Data) != len(want) {
		t.Errorf("data = %v, want %v", m.Data, want)
	}
	for k, v := range want {
		if m.Data[k] != v {
			t.Errorf("data[%s] = %q, want %q", k, m.Data[k], v)
		}
	}
	if m.Android.CollapseKey != "conv-c1" || m.Android.Priority != "HIGH" {
		t.Errorf("android = %+v, want collapse_key conv-c1, priority HIGH", m.Android)
	}
	// The TTL is counted at Send from an expiration an hour ahead.
	if m.Android.TTL != "3599s" && m.Android.TTL != "3600s" {
		t.Errorf("android.ttl = %q, want about 3600s", m.Android.TTL)
	}
	if m.APNs.Headers["apns-collapse-id"] != "conv-c1" {
		t.Errorf("apns headers = %v", m.APNs.Headers)
	}
	if m.Notification != nil {
		t.Errorf("a notification block: %s", m.Notification)
	}
}

func TestSendBadgeOnly(t *testing.T) {
	p, fake := newProvider(t)
	n := push.Notification{ID: "00000000-0000-4000-8000-000000000009", BadgeOnly: true, Badge: 1}
	if res := p.Send(context.Background(), target(1), n); res.Outcome != push.Delivered {
		t.Fatalf("Send = %+v", res)
	}
	m := fake.Messages()[0]
	if m.Android.Priority != "NORMAL" || m.Android.CollapseKey != "" || m.Android.TTL != "" {
		t.Errorf("android = %+v, want priority NORMAL and nothing else", m.Android)
	}
	if m.Data["type"] != "badge" || m.Data["badge"] != "1" || m.APNs.Headers != nil {
		t.Errorf("data %v, apns %v", m.Data, m.APNs.Headers)
	}
}

func TestSendFailures(t *testing.T) {
	tests := []struct {
		name   string
		script func(f *pushtest.FCM, token string)
		want   push.Result
	}{
		{"503 retry-after", func(f *pushtest.FCM, tok string) {
			f.Throttle(tok, http.StatusServiceUnavailable, 1, 45*time.Second)
		}, push.Result{Outcome: push.Retry, Status: 503, Reason: "UNAVAILABLE", RetryAfter: 45 * time.Second}},
		{"429 quota", func(f *pushtest.FCM, tok string) {
			f.Throttle(tok, http.StatusTooManyRequests, 1, 10*time.Second)
		}, push.Result{Outcome: push.Retry, Status: 429, Reason: "QUOTA_EXCEEDED", RetryAfter: 10 * time.Second}},
		{"500", func(f *pushtest.FCM, tok string) {
			f.Throttle(tok, http.StatusInternalServerError, 1, 0)
		}, push.Result{Outcome: push.Retry, Status: 500, Reason: "INTERNAL"}},
		{"unregistered", func(f *pushtest.FCM, tok string) {
			f.Unregister(tok)
		}, push.Result{Outcome: push.Unregistered, Status: 404, Reason: "UNREGISTERED"}},
		{"plain 404", func(f *pushtest.FCM, tok string) {
			f.Reply(tok, pushtest.FCMReply{Status: 404})
		}, push.Result{Outcome: push.Unregistered, Status: 404, Reason: "NOT_FOUND"}},
		{"400 unregistered", func(f *pushtest.FCM, tok string) {
			f.Reply(tok, pushtest.FCMReply{Status: 400, ErrorCode: "UNREGISTERED"})
		}, push.Result{Outcome: push.Unregistered, Status: 400, Reason: "UNREGISTERED"}},
		{"invalid argument", func(f *pushtest.FCM, tok string) {
			f.Reply(tok, pushtest.FCMReply{Status: 400, ErrorCode: "INVALID_ARGUMENT"})
		}, push.Result{Outcome: push.Rejected, Status: 400, Reason: "INVALID_ARGUMENT"}},
		{"403 sender mismatch", func(f *pushtest.FCM, tok string) {
			f.Reply(tok, pushtest.FCMReply{Status: 403, ErrorCode: "SENDER_ID_MISMATCH"})
		}, push.Result{Outcome: push.Rejected, Status: 403, Reason: "SENDER_ID_MISMATCH"}},
		{"401", func(f *pushtest.FCM, tok string) {
			f.Reply(tok, pushtest.FCMReply{Status: 401})
		}, push.Result{Outcome: push.Rejected, Status: 401, Reason: "UNAUTHENTICATED"}},
		{"down", func(f *pushtest.FCM, tok string) {
			f.SetDown(true)
		}, push.Result{Outcome: push.Retry, Status: 503, Reason: "UNAVAILABLE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, fake := newProvider(t)
			tt.script(fake, target(1).Token)
			if got := p.Send(context.Background(), target(1), note(1)); got != tt.want {
				t.Errorf("Send = %+v, want %+v", got, tt.want)
			}
			if fake.Count() != 0 {
				t.Errorf("fake accepted %d", fake.Count())
			}
		})
	}
	t.Run("throttle then through", func(t *testing.T) {
		p, fake := newProvider(t)
		fake.Throttle("", http.StatusServiceUnavailable, 2, time.Second)
		for i, want := range []push.Outcome{push.Retry, push.Retry, push.Delivered} {
			if res := p.Send(context.Background(), target(i), note(1)); res.Outcome != want {
				t.Errorf("Send %d = %+v, want %v", i, res, want)
			}
		}
		if fake.Count() != 1 || fake.Requests() != 3 {
			t.Errorf("count %d, requests %d; want 1, 3", fake.Count(), fake.Requests())
		}
	})
}

func TestWrongProjectRejected(t *testing.T) {
	fake := pushtest.NewFCM(t)
	p, err := New(Options{CredentialsFile: fake.CredentialsFile(), ProjectID: "someone-else",
		Endpoint: fake.URL(), HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Send(context.Background(), target(1), note(1))
	want := push.Result{Outcome: push.Rejected, Status: 403, Reason: "SENDER_ID_MISMATCH"}
	if res != want {
		t.Errorf("Send = %+v, want %+v", res, want)
	}
}

func TestForeignKeyRejected(t *testing.T) {
	fake := pushtest.NewFCM(t)
	// A key the fake does not know, though its token_uri is the fake's.
	other := pushtest.WriteServiceAccount(t, fake.Account.ProjectID, fake.Account.TokenURI)
	p, err := New(Options{CredentialsFile: other.Path, Endpoint: fake.URL(), HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Send(context.Background(), target(1), note(1))
	if res.Outcome != push.Rejected || res.Status != 400 {
		t.Errorf("Send = %+v, want rejected by the token endpoint", res)
	}
	if fake.Requests() != 0 {
		t.Errorf("a message was sent without a token")
	}
}

func TestSendNetworkError(t *testing.T) {
	p, _ := newProvider(t)
	p.sendURL = "https://127.0.0.1:1/v1/projects/x/messages:send" // nothing listens on port 1
	if res := p.Send(context.Background(), target(1), note(1)); res.Outcome != push.Retry || res.Status != 0 {
		t.Errorf("Send = %+v, want retry", res)
	}
}

func TestSendConcurrent(t *testing.T) {
	p, fake := newProvider(t)
	const workers, each = 16, 25
	pushtest.SendAll(t, p, workers, each, target, note, fake.WaitCount)
	if fake.Repeats() != 0 || fake.Mints() != 1 {
		t.Errorf("repeats %d, tokens minted %d; want 0 and 1", fake.Repeats(), fake.Mints())
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a credentials file succeeded")
	}
	if _, err := New(Options{CredentialsFile: t.TempDir() + "/missing.json"}); err == nil {
		t.Error("New with a missing file succeeded")
	}
}

// BenchmarkSend pushes b.N messages through the fake from parallel senders, as the
// pusher's workers do; -benchtime=10000x is the 10,000-notification run.
func BenchmarkSend(b *testing.B) {
	fake := pushtest.NewFCM(b)
	p, err := New(Options{CredentialsFile: fake.CredentialsFile(), Endpoint: fake.URL(),
		HTTPClient: fake.Client()})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(32) // many sends in flight per core: they mostly wait on the network
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1))
			if res := p.Send(context.Background(), target(i), note(i)); res.Outcome != push.Delivered {
				b.Errorf("Send = %+v", res)
			}
		}
	})
	b.StopTimer()
	if fake.Count() != b.N {
		b.Errorf("fake counted %d of %d", fake.Count(), b.N)
	}
}
