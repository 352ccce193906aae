package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

func TestSendRetriesWithSameID(t *testing.T) {
	tests := []struct {
		name      string
		connect   bool // send over the WebSocket first
		script    func(attempt int) sendAction
		wantTries int
		firstVia  string
	}{
		{name: "http 503 twice", script: failFirst(2, sendAction{status: 503}), wantTries: 3, firstVia: "http"},
		{name: "http dropped", script: failFirst(1, sendAction{drop: true}), wantTries: 2, firstVia: "http"},
		{name: "http 429", script: failFirst(1, sendAction{status: 429}), wantTries: 2, firstVia: "http"},
		{name: "http 502 from a proxy", script: failFirst(1, sendAction{status: 502}), wantTries: 2, firstVia: "http"},
		{name: "ws dropped before reply", connect: true, script: failFirst(1, sendAction{drop: true}), wantTries: 2, firstVia: "ws"},
		{name: "ws 503", connect: true, script: failFirst(1, sendAction{status: 503}), wantTries: 2, firstVia: "ws"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.onSend = tt.script
			var retriedMu sync.Mutex
			var retried []error
			c := f.client(t, Options{Cursor: 1, OnRetry: func(err error, _ time.Duration) {
				retriedMu.Lock()
				retried = append(retried, err)
				retriedMu.Unlock()
			}})
			ctx := testCtx(t)
			if tt.connect {
				if err := c.Connect(ctx); err != nil {
					t.Fatal(err)
				}
			}
			ack, err := c.Send(ctx, "c1", ContentText, "hello", map[string]string{"k": "v"})
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.sends) != tt.wantTries {
				t.Fatalf("%d attempts, want %d", len(f.sends), tt.wantTries)
			}
			if f.sends[0].via != tt.firstVia {
				t.Errorf("first attempt over %s, want %s", f.sends[0].via, tt.firstVia)
			}
			id := f.sends[0].req.ClientMsgID
			for i, s := range f.sends {
				if s.req.ClientMsgID != id {
					t.Errorf("attempt %d used client_msg_id %q, want %q", i+1, s.req.ClientMsgID, id)
				}
				if string(s.req.Content) != `"hello"` || s.req.Extra["k"] != "v" {
					t.Errorf("attempt %d carried content %s extra %v", i+1, s.req.Content, s.req.Extra)
				}
			}
			if ack.ClientMsgID != id || ack.Seq != 1 {
				t.Errorf("ack = %+v, want client_msg_id %s seq 1", ack, id)
			}
			retriedMu.Lock()
			defer retriedMu.Unlock()
			// A retry may also fail before reaching the server (the dropped WebSocket not yet
			// noticed), so OnRetry may be called more often than the server saw attempts.
			if len(retried) < tt.wantTries-1 {
				t.Fatalf("OnRetry called %d times, want at least %d", len(retried), tt.wantTries-1)
			}
			if want := tt.script(1).status; want != 0 && ErrorCode(retried[0]) != want {
				t.Errorf("OnRetry got %v, want an *Error %d", retried[0], want)
			}
		})
	}
}

// failFirst answers the first n attempts with act, then acks.
func failFirst(n int, act sendAction) func(int) sendAction {
	return func(attempt int) sendAction {
		if attempt <= n {
			return act
		}
		return sendAction{}
	}
}

func TestSendFinalErrors(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound, http.StatusRequestEntityTooLarge} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			f := newFake(t)
			f.onSend = func(int) sendAction { return sendAction{status: code} }
			c := f.client(t, Options{Cursor: 1})
			_, err := c.Send(testCtx(t), "c1", ContentText, "x", nil)
			var e *Error
			if !errors.As(err, &e) || e.Code != code {
				t.Fatalf("Send = %v, want *Error %d", err, code)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.sends) != 1 {
				t.Errorf("%d attempts, want 1: %d is final", len(f.sends), code)
			}
		})
	}
}

func TestSendWithIDKeepsCallerID(t *testing.T) {
	f := newFake(t)
	c := f.client(t, Options{Cursor: 1})
	ctx := testCtx(t)
	first, err := c.SendWithID(ctx, "my-id_1", "c1", ContentText, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.SendWithID(ctx, "my-id_1", "c1", ContentText, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.ClientMsgID != "my-id_1" || !again.Duplicate || again.Seq != first.Seq {
		t.Errorf("first %+v, again %+v: want the same message, the second flagged duplicate", first, again)
	}
	if _, err := c.SendWithID(ctx, "bad id!", "c1", ContentText, "x", nil); ErrorCode(err) != http.StatusBadRequest {
		t.Errorf("malformed id: %v, want a 400 *Error", err)
	}
}

func TestSendGivesUpWhenContextEnds(t *testing.T) {
	f := newFake(t)
	c := f.client(t, Options{Cursor: 1})
	ctx, cancel := context.WithCancel(testCtx(t))
	f.onSend = func(attempt int) sendAction {
		if attempt == 3 {
			cancel()
		}
		return sendAction{status: 503}
	}
	_, err := c.Send(ctx, "c1", ContentText, "x", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", err)
	}
}

func TestConcurrentSendsOverWebSocket(t *testing.T) {
	f := newFake(t)
	c := f.client(t, Options{Cursor: 1})
	ctx := testCtx(t)
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	acks := make([]MessageAck, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			acks[i], errs[i] = c.SendWithID(ctx, fmt.Sprintf("id-%d", i), "c1", ContentText, i, nil)
		})
	}
	wg.Wait()
	seqs := make(map[int64]bool)
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("send %d: %v", i, errs[i])
		}
		if acks[i].ClientMsgID != fmt.Sprintf("id-%d", i) {
			t.Errorf("send %d got the ack of %s", i, acks[i].ClientMsgID)
		}
		seqs[acks[i].Seq] = true
	}
	if len(seqs) != n {
		t.Errorf("%d distinct seqs, want %d", len(seqs), n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sends {
		if s.via != "ws" {
			t.Fatalf("a send went over %s while connected", s.via)
		}
	}
}
