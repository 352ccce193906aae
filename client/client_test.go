package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/parleychat/parley/protocol"
)

func TestBackoffFullJitter(t *testing.T) {
	b := Backoff{Base: 10 * time.Millisecond, Max: time.Second}
	for attempt := range 100 {
		ceiling := min(b.Base<<min(attempt, 30), b.Max)
		for range 20 {
			if d := b.Delay(attempt); d < 0 || d > ceiling {
				t.Fatalf("Delay(%d) = %v, want within [0, %v]", attempt, d, ceiling)
			}
		}
	}
	if d := (Backoff{}).Delay(1000); d > 30*time.Second {
		t.Errorf("default Delay(1000) = %v, want at most the 30s default max", d)
	}
}

func TestNewClientMsgID(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool)
	for range 1000 {
		id := NewClientMsgID()
		if !uuid.MatchString(id) || !protocol.ValidClientMsgID(id) {
			t.Fatalf("%q is not a valid v4 UUID client_msg_id", id)
		}
		if seen[id] {
			t.Fatalf("%q repeated", id)
		}
		seen[id] = true
	}
}

func TestEncodeFrameIsFlat(t *testing.T) {
	seq := int64(4)
	tests := []struct {
		name   string
		op     string
		params any
		want   string
	}{
		{"no params", protocol.OpPing, nil, `{"id":"r1","op":"ping"}`},
		{"empty params", protocol.OpPing, struct{}{}, `{"id":"r1","op":"ping"}`},
		{"params", protocol.OpRead, protocol.PositionRequest{ConvID: "c1", Seq: &seq}, `{"id":"r1","op":"read","conv_id":"c1","seq":4}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := encodeFrame("r1", tt.op, tt.params)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := encodeFrame("r1", "x", []int{1}); err == nil {
		t.Error("a non-object params encoded without error")
	}
}

func TestHTTPErrorsAreTyped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		writeJSON(w, http.StatusTooManyRequests, protocol.ErrorBody{Code: 429, Error: "rate limited"})
	}))
	defer srv.Close()
	c := New(Options{BaseURL: srv.URL, Token: "t"})
	_, err := c.GetConversation(context.Background(), "c1")
	var e *Error
	if !errors.As(err, &e) || e.Code != 429 || e.RetryAfter != 3*time.Second || e.Message != "rate limited" {
		t.Fatalf("got %#v", err)
	}
}

func TestAdminCreateUser(t *testing.T) {
	existing := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" || r.URL.Path != "/v1/admin/users" {
			writeJSON(w, 401, protocol.ErrorBody{Code: 401, Error: "no"})
			return
		}
		var req protocol.CreateUserRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		status := http.StatusCreated
		if existing[req.UserID] {
			status = http.StatusOK
		}
		existing[req.UserID] = true
		writeJSON(w, status, protocol.User(req))
	}))
	defer srv.Close()
	a := NewAdmin(srv.URL+"/", "secret", nil)
	ctx := context.Background()
	for i, wantCreated := range []bool{true, false} {
		u, created, err := a.CreateUser(ctx, "bob", "Bob")
		if err != nil || u.UserID != "bob" || created != wantCreated {
			t.Errorf("call %d: %+v created=%v err=%v, want created=%v", i+1, u, created, err, wantCreated)
		}
	}
}
