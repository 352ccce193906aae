package pushtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	webpushgo "github.com/SherClockHolmes/webpush-go"

	"github.com/parleychat/parley/internal/push/pushtest"
)

// doFunc lets a test change a request webpush-go built before it is sent.
type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// sender pushes to the fake with webpush-go itself, so that the fake is checked against an
// implementation it does not share code with.
type sender struct {
	pub, priv string
	client    *http.Client
}

func newSender(t *testing.T, f *pushtest.WebPush) sender {
	t.Helper()
	priv, pub, err := webpushgo.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, TLSClientConfig: f.TLSConfig(), ForceAttemptHTTP2: true}}
	t.Cleanup(c.CloseIdleConnections)
	return sender{pub: pub, priv: priv, client: c}
}

// send pushes data to sub; edit, when not nil, changes the request first. It returns the
// status and the Retry-After header.
func (s sender) send(t *testing.T, sub string, data any, edit func(*http.Request)) (int, string) {
	t.Helper()
	var ws webpushgo.Subscription
	if err := json.Unmarshal([]byte(sub), &ws); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(data)
	do := doFunc(func(r *http.Request) (*http.Response, error) {
		if edit != nil {
			edit(r)
		}
		return s.client.Do(r)
	})
	resp, err := webpushgo.SendNotification(payload, &ws, &webpushgo.Options{
		HTTPClient: do, Subscriber: "ops@example.com", TTL: 60, Topic: "c1", Urgency: webpushgo.UrgencyHigh,
		VAPIDPublicKey: s.pub, VAPIDPrivateKey: s.priv,
	})
	if err != nil {
		t.Errorf("send: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestWebPushDecrypts: a push webpush-go encrypted is decrypted and recorded with its
// headers and VAPID claims.
func TestWebPushDecrypts(t *testing.T) {
	for _, tc := range []struct {
		name string
		fake func(testing.TB) *pushtest.WebPush
	}{{"http", pushtest.NewWebPush}, {"tls", pushtest.NewWebPushTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fake(t)
			s := newSender(t, f)
			f.RequireVAPIDKey(s.pub)
			sub := f.NewSubscription()
			data := map[string]string{"type": "message", "push_id": "p1", "sender_name": "Bob", "preview": "héllo"}
			if code, _ := s.send(t, sub, data, nil); code != http.StatusCreated {
				t.Fatalf("status %d, errors %v", code, f.Errors())
			}
			m := f.Messages()[0]
			if m.Data["preview"] != "héllo" || m.Data["push_id"] != "p1" || m.SubscriptionID != f.SubscriptionID(sub) {
				t.Errorf("message %+v", m)
			}
			if m.TTL != 60 || m.Topic != "c1" || m.Urgency != "high" || m.VAPIDKey != s.pub || m.Subject != "mailto:ops@example.com" {
				t.Errorf("headers: %+v", m)
			}
		})
	}
}

// TestWebPushRefuses: a push that breaks the protocol is refused with the status a push
// service answers, and recorded in Errors.
func TestWebPushRefuses(t *testing.T) {
	f := pushtest.NewWebPush(t)
	s := newSender(t, f)
	other := newSender(t, f)
	data := map[string]string{"push_id": "p"}
	for _, tc := range []struct {
		name string
		edit func(*http.Request)
		want int
	}{
		{"no TTL", func(r *http.Request) { r.Header.Del("TTL") }, 400},
		{"bad Topic", func(r *http.Request) { r.Header.Set("Topic", "a b") }, 400},
		{"bad Urgency", func(r *http.Request) { r.Header.Set("Urgency", "now") }, 400},
		{"not vapid", func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, 401},
		{"other key", func(r *http.Request) {
			h := r.Header.Get("Authorization")
			r.Header.Set("Authorization", h[:strings.Index(h, "k=")+2]+other.pub)
		}, 401},
		{"corrupt body", func(r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			b[len(b)-1] ^= 1
			r.Body = io.NopCloser(bytes.NewReader(b))
		}, 400},
		{"no encoding", func(r *http.Request) { r.Header.Del("Content-Encoding") }, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Errors())
			if code, _ := s.send(t, f.NewSubscription(), data, tc.edit); code != tc.want {
				t.Errorf("status %d, want %d (errors %v)", code, tc.want, f.Errors())
			}
			if len(f.Errors()) != before+1 {
				t.Errorf("Errors %v, want one more", f.Errors())
			}
		})
	}
	t.Run("wrong aud", func(t *testing.T) {
		// The same server by another name: aud is http://localhost:port, not its origin.
		sub := strings.Replace(f.NewSubscription(), "127.0.0.1", "localhost", 1)
		if code, _ := s.send(t, sub, data, nil); code != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", code)
		}
	})
	t.Run("required key", func(t *testing.T) {
		f.RequireVAPIDKey(other.pub)
		defer f.RequireVAPIDKey("")
		if code, _ := s.send(t, f.NewSubscription(), data, nil); code != http.StatusForbidden {
			t.Errorf("status %d, want 403", code)
		}
	})
	t.Run("unknown subscription", func(t *testing.T) {
		sub := strings.Replace(f.NewSubscription(), "/push/", "/push/x", 1)
		if code, _ := s.send(t, sub, data, nil); code != http.StatusNotFound {
			t.Errorf("status %d, want 404", code)
		}
	})
	if f.Count() != 0 {
		t.Errorf("Count %d, want 0", f.Count())
	}
}

// TestWebPushScript: failures for the next k requests, a subscription gone, down mode, Reset.
func TestWebPushScript(t *testing.T) {
	f := pushtest.NewWebPush(t)
	s := newSender(t, f)
	sub := f.NewSubscription()
	data := map[string]string{"push_id": "p"}

	f.FailNext(2, http.StatusTooManyRequests, "3")
	for i := range 2 {
		if code, ra := s.send(t, sub, data, nil); code != 429 || ra != "3" {
			t.Errorf("request %d: %d Retry-After %q, want 429 3", i, code, ra)
		}
	}
	if code, _ := s.send(t, sub, data, nil); code != 201 {
		t.Errorf("after the failures: %d", code)
	}
	f.SetDown(true)
	if code, ra := s.send(t, sub, data, nil); code != 503 || ra == "" {
		t.Errorf("down: %d Retry-After %q", code, ra)
	}
	f.SetDown(false)
	gone := f.NewSubscription()
	f.Unsubscribe(gone, http.StatusGone)
	if code, _ := s.send(t, gone, data, nil); code != 410 {
		t.Errorf("gone: %d", code)
	}
	f.Unsubscribe(f.SubscriptionID(gone), http.StatusNotFound) // by id or endpoint too
	if code, _ := s.send(t, gone, data, nil); code != 404 {
		t.Errorf("expired: %d", code)
	}
	if code, _ := s.send(t, sub, data, nil); code != 201 {
		t.Errorf("a repeat: %d", code)
	}
	f.FailNext(5, http.StatusServiceUnavailable, "")
	f.Reset() // drops the script
	if code, _ := s.send(t, sub, map[string]string{"push_id": "q"}, nil); code != 201 {
		t.Errorf("after Reset: %d", code)
	}
	if f.Count() != 2 || f.Repeats() != 1 || len(f.Messages()) != 3 || f.Requests() != 8 {
		t.Errorf("Count %d Repeats %d Messages %d Requests %d, want 2 1 3 8", f.Count(), f.Repeats(), len(f.Messages()), f.Requests())
	}
}

// TestWebPushWaitCount: WaitCount returns once enough distinct pushes are in, and with the
// context's error when they do not come.
func TestWebPushWaitCount(t *testing.T) {
	f := pushtest.NewWebPush(t)
	s := newSender(t, f)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.WaitCount(short, 1); err == nil || !strings.Contains(err.Error(), "0 of 1") {
		t.Fatalf("WaitCount with nothing sent = %v", err)
	}
	sub := f.NewSubscription()
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- f.WaitCount(ctx, 3) }()
	for i := range 3 {
		s.send(t, sub, map[string]string{"push_id": fmt.Sprint(i)}, nil)
		s.send(t, sub, map[string]string{"push_id": fmt.Sprint(i)}, nil) // a repeat does not count
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.Count() != 3 || f.Repeats() != 3 {
		t.Errorf("Count %d Repeats %d, want 3 3", f.Count(), f.Repeats())
	}
}

// TestWebPushConcurrent: two thousand pushes at once (300 under the race detector), to a
// hundred subscriptions.
func TestWebPushConcurrent(t *testing.T) {
	n, subs := 2000, 100
	if raceDetector {
		n = 300
	}
	f := pushtest.NewWebPush(t)
	s := newSender(t, f)
	ss := make([]string, subs)
	for i := range ss {
		ss[i] = f.NewSubscription()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if code, _ := s.send(t, ss[i%subs], map[string]string{"push_id": fmt.Sprint(i)}, nil); code != 201 {
				t.Errorf("push %d: %d", i, code)
			}
		})
	}
	if err := f.WaitCount(ctx, n); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if f.Count() != n || f.Repeats() != 0 || len(f.Errors()) != 0 {
		t.Errorf("Count %d Repeats %d Errors %v", f.Count(), f.Repeats(), f.Errors())
	}
}
