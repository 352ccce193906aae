package client

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/protocol"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// collect returns an OnEvent that forwards events to the returned channel.
func collect() (func(SyncEvent), chan SyncEvent) {
	ch := make(chan SyncEvent, 1024)
	return func(ev SyncEvent) { ch <- ev }, ch
}

// expectCursors receives len(want) events and checks their cursors, in order.
func expectCursors(t *testing.T, evs <-chan SyncEvent, want ...int64) {
	t.Helper()
	for _, w := range want {
		ev := recv(t, evs, "event")
		if ev.Cursor != w {
			t.Fatalf("got event cursor %d, want %d", ev.Cursor, w)
		}
	}
}

// expectNoMore checks, after the session has stopped, that nothing else was delivered.
func expectNoMore(t *testing.T, evs <-chan SyncEvent) {
	t.Helper()
	select {
	case ev := <-evs:
		t.Fatalf("unexpected extra event with cursor %d", ev.Cursor)
	default:
	}
}

func TestSessionDeliversEachCursorOnceInOrder(t *testing.T) {
	tests := []struct {
		name     string
		logLen   int
		pageMax  int
		push     []int64
		wantSync []int64 // cursors of the HTTP syncs the gaps need
	}{
		{name: "gap of one", logLen: 4, push: []int64{1, 2, 4}, wantSync: []int64{2}},
		{name: "gap over pages", logLen: 7, pageMax: 2, push: []int64{1, 7}, wantSync: []int64{1, 3, 5}},
		{name: "repeats dropped", logLen: 3, push: []int64{1, 2, 2, 1, 3, 3}},
		{name: "gap first then repeats", logLen: 3, push: []int64{2, 1, 2, 3}, wantSync: []int64{0}},
		{name: "everything a repeat of the fill", logLen: 5, push: []int64{5, 3, 4, 5}, wantSync: []int64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.setLog(tt.logLen)
			f.syncPageMax = tt.pageMax
			onEvent, evs := collect()
			inbox := NewInbox()
			c := f.client(t, Options{OnEvent: onEvent, Inbox: inbox})
			if err := c.Connect(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			fc := recv(t, f.conns, "connection")
			if fc.cursorErr != nil || fc.cursor != 0 {
				t.Fatalf("first connection cursor = %d (%v), want 0 from the snapshot", fc.cursor, fc.cursorErr)
			}
			for _, cur := range tt.push {
				fc.push(f.event(cur))
			}
			want := make([]int64, tt.logLen)
			for i := range want {
				want[i] = int64(i + 1)
			}
			expectCursors(t, evs, want...)
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			expectNoMore(t, evs)
			f.mu.Lock()
			gotSync := slices.Clone(f.syncCursors)
			f.mu.Unlock()
			if !slices.Equal(gotSync, tt.wantSync) {
				t.Errorf("sync requests from cursors %v, want %v", gotSync, tt.wantSync)
			}
			if got := c.Cursor(); got != int64(tt.logLen) {
				t.Errorf("Cursor() = %d, want %d", got, tt.logLen)
			}
			if got := len(inbox.Messages("c1")); got != tt.logLen {
				t.Errorf("inbox holds %d messages, want %d", got, tt.logLen)
			}
		})
	}
}

func TestSessionReconnectResumesFromLastCursor(t *testing.T) {
	f := newFake(t)
	f.setLog(3)
	onEvent, evs := collect()
	c := f.client(t, Options{OnEvent: onEvent})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fc1 := recv(t, f.conns, "first connection")
	if fc1.auth != "Bearer "+f.token || fc1.qtoken != f.token {
		t.Errorf("token: header %q, query %q; want both", fc1.auth, fc1.qtoken)
	}
	fc1.push(f.event(1), f.event(2))
	expectCursors(t, evs, 1, 2)
	fc1.closeWith(websocket.CloseGoingAway)

	fc2 := recv(t, f.conns, "second connection")
	if fc2.cursor != 2 {
		t.Fatalf("reconnected with cursor %d, want 2", fc2.cursor)
	}
	fc2.push(f.event(3))
	expectCursors(t, evs, 3)

	// An abrupt drop (no close frame) resumes the same way.
	fc2.ws.Close()
	fc3 := recv(t, f.conns, "third connection")
	if fc3.cursor != 3 {
		t.Fatalf("reconnected with cursor %d, want 3", fc3.cursor)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectNoMore(t, evs)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snapshots != 1 {
		t.Errorf("took %d snapshots, want 1 (only the fresh start)", f.snapshots)
	}
}

func TestSessionStartsFromGivenCursor(t *testing.T) {
	f := newFake(t)
	f.setLog(7)
	onEvent, evs := collect()
	c := f.client(t, Options{OnEvent: onEvent, Cursor: 5})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fc := recv(t, f.conns, "connection")
	if fc.cursor != 5 {
		t.Fatalf("connected with cursor %d, want 5", fc.cursor)
	}
	fc.push(f.event(5), f.event(6), f.event(7))
	expectCursors(t, evs, 6, 7)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snapshots != 0 {
		t.Errorf("took %d snapshots, want none when resuming", f.snapshots)
	}
}

func TestSessionStopsWhenReplaced(t *testing.T) {
	f := newFake(t)
	c := f.client(t, Options{Cursor: 1})
	errc := make(chan error, 1)
	go func() { errc <- c.Run(testCtx(t)) }()
	fc := recv(t, f.conns, "connection")
	fc.closeWith(closeReplaced)
	err := recv(t, errc, "Run to return")
	if !errors.Is(err, ErrReplaced) {
		t.Fatalf("Run = %v, want ErrReplaced", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wsCount != 1 {
		t.Errorf("%d connections, want 1: a replaced session must not reconnect", f.wsCount)
	}
}

func TestSessionStopsWhenTokenRevoked(t *testing.T) {
	f := newFake(t)
	c := f.client(t, Options{Cursor: 1})
	errc := make(chan error, 1)
	go func() { errc <- c.Run(testCtx(t)) }()
	fc := recv(t, f.conns, "connection")
	f.mu.Lock()
	f.refuseWS = http.StatusUnauthorized
	f.mu.Unlock()
	fc.closeWith(websocket.ClosePolicyViolation)
	err := recv(t, errc, "Run to return")
	if ErrorCode(err) != http.StatusUnauthorized {
		t.Fatalf("Run = %v, want a 401 *Error", err)
	}
}

// TestSessionStopsOnRevokedOrExpiredClose: a server closing with 4003 (revoked) or 4004
// (token expired) ends the session with a 401 at once, without dialling again.
func TestSessionStopsOnRevokedOrExpiredClose(t *testing.T) {
	for _, code := range []int{4003, 4004} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			f := newFake(t)
			c := f.client(t, Options{Cursor: 1})
			errc := make(chan error, 1)
			go func() { errc <- c.Run(testCtx(t)) }()
			fc := recv(t, f.conns, "connection")
			fc.closeWith(code)
			err := recv(t, errc, "Run to return")
			if ErrorCode(err) != http.StatusUnauthorized {
				t.Fatalf("Run = %v, want a 401 *Error", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.wsCount != 1 {
				t.Errorf("%d connections, want 1: a revoked or expired session must not redial", f.wsCount)
			}
		})
	}
}

func TestConnectRefusedToken(t *testing.T) {
	f := newFake(t)
	f.refuseWS = http.StatusUnauthorized
	c := f.client(t, Options{Cursor: 1})
	if err := c.Connect(testCtx(t)); ErrorCode(err) != http.StatusUnauthorized {
		t.Fatalf("Connect = %v, want a 401 *Error", err)
	}
}

func TestSessionResnapshotsOnRefusedCursor(t *testing.T) {
	for _, code := range []int{http.StatusGone, http.StatusConflict} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			f := newFake(t)
			f.setLog(5)
			f.snapshotCursor = 3
			onEvent, evs := collect()
			resets := make(chan SyncSnapshot, 4)
			c := f.client(t, Options{
				OnEvent: onEvent, Cursor: 1,
				OnReset: func(s SyncSnapshot) { resets <- s },
			})
			if err := c.Connect(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			fc1 := recv(t, f.conns, "first connection")
			fc1.write(protocol.PushFrame{Op: protocol.OpError, Code: code})
			fc1.closeWith(websocket.ClosePolicyViolation)
			if snap := recv(t, resets, "OnReset"); snap.Cursor != 3 {
				t.Fatalf("reset to cursor %d, want 3", snap.Cursor)
			}
			fc2 := recv(t, f.conns, "second connection")
			if fc2.cursor != 3 {
				t.Fatalf("reconnected with cursor %d, want the snapshot's 3", fc2.cursor)
			}
			fc2.push(f.event(4), f.event(5))
			expectCursors(t, evs, 4, 5)
		})
	}
}

func TestAutoDeliveredReportsHighestSeqOfOthers(t *testing.T) {
	f := newFake(t)
	f.log = []SyncEvent{
		msgEvent(1, "c1", 1, "bob"),
		msgEvent(2, "c2", 1, "alice"),
		msgEvent(3, "c1", 2, "bob"),
		msgEvent(4, "c1", 3, "bob"),
	}
	c := f.client(t, Options{Cursor: 0, UserID: "alice", AutoDelivered: true})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fc := recv(t, f.conns, "connection")
	fc.push(f.log...)
	for {
		d := recv(t, f.delivered, "delivered report")
		if d.conv != "c1" {
			t.Fatalf("delivered reported for %s: own messages need none", d.conv)
		}
		if d.seq == 3 {
			break
		}
	}
}

func TestSessionFetchesPushesDroppedOnOverflow(t *testing.T) {
	f := newFake(t)
	// More events than the queue holds: each takes at least as many bytes as the first.
	n := 10 + maxQueuedBytes/eventSize(ptr(msgEvent(1, "c1", 1, "bob"))) + 100
	f.setLog(n)
	// Room for every event: Connect waits for the delivery lock, which the dispatcher may
	// hold until it has handed over all of them (a smaller buffer deadlocked, now and then).
	evs := make(chan SyncEvent, n)
	onEvent := func(ev SyncEvent) { evs <- ev }
	c := f.client(t, Options{OnEvent: onEvent, Cursor: 10})
	// Fill the queue before the dispatcher runs: the push at cursor full is the first that
	// does not fit, and the 75 after it do not either.
	full := int64(11)
	for ; !c.overflow.Load(); full++ {
		c.enqueue(f.event(full))
	}
	full--
	last := full + 75
	for cur := full + 1; cur <= last; cur++ {
		c.enqueue(f.event(cur))
	}
	f.setLog(int(last))
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for want := int64(11); want <= last; want++ {
		expectCursors(t, evs, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int64{full - 1}; !slices.Equal(f.syncCursors, want) {
		t.Errorf("sync requests from cursors %v, want %v", f.syncCursors, want)
	}
}

func ptr[T any](v T) *T { return &v }

func TestSessionReconnectsWhenGapCannotBeFilled(t *testing.T) {
	f := newFake(t)
	f.setLog(4)
	f.syncStatus = http.StatusServiceUnavailable
	onEvent, evs := collect()
	c := f.client(t, Options{OnEvent: onEvent, Cursor: 0})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fc1 := recv(t, f.conns, "first connection")
	fc1.push(f.event(1), f.event(3))
	expectCursors(t, evs, 1)
	fc2 := recv(t, f.conns, "second connection")
	if fc2.cursor != 1 {
		t.Fatalf("reconnected with cursor %d, want 1", fc2.cursor)
	}
	fc2.push(f.event(2), f.event(3), f.event(4))
	expectCursors(t, evs, 2, 3, 4)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectNoMore(t, evs)
}

func TestSessionStopsWhenSyncRefusesToken(t *testing.T) {
	f := newFake(t)
	f.setLog(4)
	f.syncStatus = http.StatusUnauthorized
	c := f.client(t, Options{Cursor: 0})
	errc := make(chan error, 1)
	go func() { errc <- c.Run(testCtx(t)) }()
	fc := recv(t, f.conns, "connection")
	fc.push(f.event(2))
	if err := recv(t, errc, "Run to return"); ErrorCode(err) != http.StatusUnauthorized {
		t.Fatalf("Run = %v, want a 401 *Error", err)
	}
}

// A server that accepts every WebSocket and drops it at once must not be redialled in a tight
// loop: a connection that did not last stableConn does not restart the backoff, so each
// reconnect waits for a higher attempt (the JS SDK had this bug, issue 7).
func TestSessionBacksOffWhenConnectionsDieAtOnce(t *testing.T) {
	f := newFake(t)
	f.setLog(1)
	attempts := make(chan int64, 16)
	log := slog.New(attemptHandler{attempts})
	c := f.client(t, Options{Logger: log})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for want := int64(0); want < 4; want++ {
		fc := recv(t, f.conns, "a connection")
		fc.ws.Close() // accepted, then dropped before anything else happens
		if got := recv(t, attempts, "the reconnect"); got != want {
			t.Fatalf("reconnect %d waited for attempt %d, want %d: the backoff restarted", want+1, got, want)
		}
	}
}

// attemptHandler sends the "attempt" of every "connection ended" log record to a channel.
type attemptHandler struct{ ch chan<- int64 }

func (h attemptHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h attemptHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h attemptHandler) WithGroup(string) slog.Handler            { return h }
func (h attemptHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "connection ended") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "attempt" {
			select {
			case h.ch <- a.Value.Int64():
			default: // the test stopped reading: never block the session
			}
		}
		return true
	})
	return nil
}
