package pushtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const testDevice = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// apnsToken signs a provider token for key with the given overrides.
func apnsToken(t *testing.T, key APNsKey, kid, iss string, iat time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "iat": iat.Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apnsPost sends one raw request to the fake and returns the status and reason.
func apnsPost(t *testing.T, f *APNs, path, bearer string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "bearer "+bearer)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb struct{ Reason string }
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Reason
}

func goodHeaders(id string) map[string]string {
	return map[string]string{"apns-id": id, "apns-topic": "chat.parley.app", "apns-push-type": "alert"}
}

func TestAPNsChecks(t *testing.T) {
	f := NewAPNs(t)
	good := apnsToken(t, f.Key, f.Key.KeyID, f.Key.TeamID, time.Now())
	other := NewAPNsKey(t)
	const id = "6e1c2a52-6f0b-4a8e-9d1a-0f4b7e9b3c21"
	const payload = `{"aps":{"badge":1}}`
	with := func(k, v string) map[string]string {
		h := goodHeaders(id)
		h[k] = v
		return h
	}
	tests := []struct {
		name       string
		path       string
		bearer     string
		header     map[string]string
		body       string
		wantStatus int
		wantReason string
	}{
		{"accepted", "/3/device/" + testDevice, good, goodHeaders(id), payload, 200, ""},
		{"no token", "/3/device/" + testDevice, "", goodHeaders(id), payload, 403, "MissingProviderToken"},
		{"foreign key", "/3/device/" + testDevice, apnsToken(t, other, f.Key.KeyID, f.Key.TeamID, time.Now()),
			goodHeaders(id), payload, 403, "InvalidProviderToken"},
		{"wrong kid", "/3/device/" + testDevice, apnsToken(t, f.Key, "OTHERKEYID", f.Key.TeamID, time.Now()),
			goodHeaders(id), payload, 403, "InvalidProviderToken"},
		{"wrong team", "/3/device/" + testDevice, apnsToken(t, f.Key, f.Key.KeyID, "OTHERTEAM1", time.Now()),
			goodHeaders(id), payload, 403, "InvalidProviderToken"},
		{"old token", "/3/device/" + testDevice, apnsToken(t, f.Key, f.Key.KeyID, f.Key.TeamID, time.Now().Add(-61*time.Minute)),
			goodHeaders(id), payload, 403, "ExpiredProviderToken"},
		{"bad path", "/3/other/" + testDevice, good, goodHeaders(id), payload, 404, "BadPath"},
		{"bad device token", "/3/device/not-hex", good, goodHeaders(id), payload, 400, "BadDeviceToken"},
		{"no topic", "/3/device/" + testDevice, good, with("apns-topic", ""), payload, 400, "MissingTopic"},
		{"bad id", "/3/device/" + testDevice, good, with("apns-id", "42"), payload, 400, "BadMessageId"},
		{"no push type", "/3/device/" + testDevice, good, with("apns-push-type", ""), payload, 400, "InvalidPushType"},
		{"bad priority", "/3/device/" + testDevice, good, with("apns-priority", "7"), payload, 400, "BadPriority"},
		{"bad expiration", "/3/device/" + testDevice, good, with("apns-expiration", "tomorrow"), payload, 400, "BadExpirationDate"},
		{"empty payload", "/3/device/" + testDevice, good, goodHeaders(id), "", 400, "PayloadEmpty"},
		{"no aps", "/3/device/" + testDevice, good, goodHeaders(id), `{"a":1}`, 400, "BadPayload (no aps dictionary)"},
		{"too large", "/3/device/" + testDevice, good, goodHeaders(id),
			`{"aps":{},"x":"` + strings.Repeat("x", 4096) + `"}`, 413, "PayloadTooLarge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reason := apnsPost(t, f, tt.path, tt.bearer, tt.header, tt.body)
			if status != tt.wantStatus || reason != tt.wantReason {
				t.Errorf("got %d %q, want %d %q", status, reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
	if f.Count() != 1 || f.Requests() != len(tests) {
		t.Errorf("count %d, requests %d; want 1, %d", f.Count(), f.Requests(), len(tests))
	}
}

func TestAPNsRepeatsAndScript(t *testing.T) {
	f := NewAPNs(t)
	good := apnsToken(t, f.Key, f.Key.KeyID, f.Key.TeamID, time.Now())
	const other = "abcdef"
	post := func(device, id string) int {
		status, _ := apnsPost(t, f, "/3/device/"+device, good, goodHeaders(id), `{"aps":{}}`)
		return status
	}
	f.Throttle("", http.StatusServiceUnavailable, 1, time.Second)
	f.Throttle(testDevice, http.StatusTooManyRequests, 2, time.Second)
	// The device's own replies come first, then the global one, then acceptance.
	for i, want := range []int{429, 429, 503, 200, 200} {
		if got := post(testDevice, "11111111-1111-4111-8111-111111111111"); got != want {
			t.Errorf("request %d: %d, want %d", i, got, want)
		}
	}
	f.Throttle("", http.StatusServiceUnavailable, 0, 0)
	f.Reply(other, APNsReply{Status: http.StatusOK})
	if post(other, "22222222-2222-4222-8222-222222222222") != 200 {
		t.Error("a device exempt from the global throttle was not accepted")
	}
	if post(testDevice, "44444444-4444-4444-8444-444444444444") != 503 {
		t.Error("the global throttle did not apply")
	}
	f.Reset()
	if f.Count() != 2 || f.Repeats() != 1 {
		t.Errorf("count %d, repeats %d; want 2, 1", f.Count(), f.Repeats())
	}
	f.SetDown(true)
	if got := post(other, "33333333-3333-4333-8333-333333333333"); got != 503 {
		t.Errorf("while down: %d", got)
	}
	f.Unregister(other, time.Now())
	f.Reset()
	if got := post(other, "33333333-3333-4333-8333-333333333333"); got != 200 {
		t.Errorf("after Reset: %d", got)
	}
	if f.Tokens() != 1 {
		t.Errorf("tokens %d, want 1", f.Tokens())
	}
}

func TestAPNsWaitCount(t *testing.T) {
	f := NewAPNs(t)
	good := apnsToken(t, f.Key, f.Key.KeyID, f.Key.TeamID, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.WaitCount(ctx, 3) }()
	for _, id := range []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002",
		"00000000-0000-4000-8000-000000000003"} {
		apnsPost(t, f, "/3/device/"+testDevice, good, goodHeaders(id), `{"aps":{}}`)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := f.WaitCount(short, 4); err == nil {
		t.Error("WaitCount for more than was sent returned nil")
	}
}

func TestAPNsRecordsNotification(t *testing.T) {
	f := NewAPNs(t)
	good := apnsToken(t, f.Key, f.Key.KeyID, f.Key.TeamID, time.Now())
	h := goodHeaders("00000000-0000-4000-8000-000000000001")
	h["apns-priority"], h["apns-expiration"], h["apns-collapse-id"] = "5", "1900000000", "c1"
	var body bytes.Buffer
	body.WriteString(`{"aps":{"badge":2},"push_id":"x"}`)
	apnsPost(t, f, "/3/device/"+testDevice, good, h, body.String())
	n := f.Notifications()[0]
	if n.Priority != 5 || n.Expiration != 1900000000 || n.CollapseID != "c1" || n.Topic != "chat.parley.app" ||
		n.PushType != "alert" || n.DeviceToken != testDevice || n.APS()["badge"] != 2.0 || n.Payload["push_id"] != "x" {
		t.Errorf("recorded %+v", n)
	}
	if n.Header.Get("Authorization") != "" {
		t.Error("the bearer token was recorded")
	}
}
