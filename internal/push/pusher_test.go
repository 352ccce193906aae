package push

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/protocol"
)

// fakeProvider records what the pusher sends and answers what the test scripts.
type fakeProvider struct {
	mu     sync.Mutex
	sent   []Notification              // every attempt, in order
	answer func(n Notification) Result // nil: Delivered
	got    chan Notification           // every attempt, also here
}

func newFakeProvider() *fakeProvider { return &fakeProvider{got: make(chan Notification, 1024)} }

func (f *fakeProvider) Send(ctx context.Context, t Target, n Notification) Result {
	f.mu.Lock()
	f.sent = append(f.sent, n)
	answer := f.answer
	f.mu.Unlock()
	r := Result{Outcome: Delivered, Status: 200}
	if answer != nil {
		r = answer(n)
	}
	f.got <- n
	return r
}

func (f *fakeProvider) setAnswer(a func(Notification) Result) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

// next waits for the next attempt.
func (f *fakeProvider) next(t *testing.T) Notification {
	t.Helper()
	select {
	case n := <-f.got:
		return n
	case <-time.After(10 * time.Second): // a bound on failure, not a synchronisation
		t.Fatal("no notification within 10 s")
		return Notification{}
	}
}

// testObs tells the test of removed tokens.
type testObs struct {
	nopObserver
	removed chan string
}

func (o *testObs) PushTokenRemoved(provider, reason string) { o.removed <- reason }

type fakeFacts struct{}

func (fakeFacts) Badge(ctx context.Context, userID string) (int, error) { return 7, nil }
func (fakeFacts) BadgeIn(context.Context, store.ReadTx, string, map[string]bool) (int, error) {
	return 7, nil
}
func (fakeFacts) Name(ctx context.Context, userID string) (string, error) {
	return "Name of " + userID, nil
}

// world is a store with users alice and bob, direct conversations d1 and d2 between them,
// and bob's phone registered for push.
type world struct {
	t     *testing.T
	st    store.Store
	prov  *fakeProvider
	obs   *testObs
	pres  *Presence
	p     *Pusher
	stop  func()
	clock int64
}

func newWorld(t *testing.T, dir string, o Options) *world {
	t.Helper()
	st, err := pebble.Open(context.Background(), pebble.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{t: t, st: st, prov: newFakeProvider(), obs: &testObs{removed: make(chan string, 16)}}
	ctx := context.Background()
	err = st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.User(ctx, "alice"); err == nil {
			return nil // reopened
		}
		for _, u := range []string{"alice", "bob"} {
			if err := tx.CreateUser(ctx, store.User{ID: u, Name: u, TokenGen: 1}); err != nil {
				return err
			}
		}
		for _, c := range []string{"d1", "d2"} {
			if err := tx.CreateConversation(ctx, store.Conversation{ID: c, Type: protocol.TypeDirect, MembersCount: 2}); err != nil {
				return err
			}
			for i, u := range []string{"alice", "bob"} {
				if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: u, Ordinal: int64(i + 1)}); err != nil {
					return err
				}
			}
		}
		return tx.PutPushTarget(ctx, store.PushTarget{UserID: "bob", DeviceID: "phone", Provider: FCM, Token: "tok-bob", RegisteredAt: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	w.start(o)
	return w
}

// start runs a pusher with o (store, providers and presence filled in).
func (w *world) start(o Options) {
	w.pres = NewPresence(nil)
	o.Store, o.Facts, o.Providers, o.Presence, o.Obs = w.st, fakeFacts{}, map[string]Provider{FCM: w.prov}, w.pres, w.obs
	if o.CollapseWindow == 0 {
		o.CollapseWindow = time.Nanosecond
	}
	w.p = New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.p.Run(ctx); err != nil {
			w.t.Error(err)
		}
	}()
	w.stop = func() { cancel(); <-done }
	w.t.Cleanup(func() { w.stop() })
}

// send appends a message from alice to conv and tells the pusher, as chat does.
func (w *world) send(conv string) store.Appended {
	w.t.Helper()
	w.clock++
	res, err := w.st.AppendMessage(context.Background(), store.Message{ConvID: conv, SenderID: "alice",
		ClientMsgID: "c" + strconv.FormatInt(w.clock, 10), MsgID: "m" + strconv.FormatInt(w.clock, 10),
		ContentType: 1, Content: []byte(`{"text":"hello there"}`), CreatedAt: time.Now().UnixMilli()})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, d := range res.Events {
		w.p.Notify(d.UserID, d.Cursor)
	}
	return res
}

func bobCursor(res store.Appended) int64 {
	for _, d := range res.Events {
		if d.UserID == "bob" {
			return d.Cursor
		}
	}
	return 0
}

func TestOfflineDeviceGetsOnePushPerMessage(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	ids := map[string]bool{}
	for i := 1; i <= 3; i++ {
		res := w.send("d1")
		n := w.prov.next(t)
		if n.ConvID != "d1" || n.Seq != int64(i) || n.Cursor != bobCursor(res) || n.SenderID != "alice" ||
			n.SenderName != "Name of alice" || n.Badge != 7 || n.Preview != "" || n.CollapseID != collapseID("d1") {
			t.Fatalf("push %d: %+v", i, n)
		}
		if ids[n.ID] {
			t.Fatalf("push %d repeats id %s", i, n.ID)
		}
		ids[n.ID] = true
	}
	// The sender's own copy (alice has no target) and nothing else: a marker message to d2
	// is the next push.
	w.send("d2")
	if n := w.prov.next(t); n.ConvID != "d2" {
		t.Fatalf("after three pushes, got %+v, want the d2 marker", n)
	}
}

func TestLiveDeviceIsNotPushed(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{Grace: 50 * time.Millisecond})
	w.pres.Open("bob", "phone")
	res := w.send("d1")
	w.pres.Took("bob", "phone", bobCursor(res))
	w.pres.Close("bob", "phone")
	// Offline now; once the grace period has passed, the next message is pushed, and only it.
	res = w.send("d2")
	n := w.prov.next(t)
	if n.ConvID != "d2" || n.Cursor != bobCursor(res) {
		t.Fatalf("got %+v, want only the message sent after the device went offline", n)
	}
}

func TestLiveDeviceThatDoesNotTakeIsPushedAfterGrace(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{Grace: 100 * time.Millisecond})
	w.pres.Open("bob", "phone") // connected, but never takes the event (a stuck socket)
	start := time.Now()
	w.send("d1")
	n := w.prov.next(t)
	if n.ConvID != "d1" {
		t.Fatalf("got %+v", n)
	}
	if d := time.Since(start); d < 95*time.Millisecond { // the event's time is in whole ms
		t.Fatalf("pushed after %v, before the grace period", d)
	}
}

func TestMutedConversationIsNotPushed(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	ctx := context.Background()
	err := w.st.Update(ctx, func(tx store.Tx) error {
		return tx.PutMute(ctx, store.Mute{UserID: "bob", ConvID: "d1", Until: protocol.MuteForever})
	})
	if err != nil {
		t.Fatal(err)
	}
	w.send("d1")
	w.send("d1")
	w.send("d2")
	if n := w.prov.next(t); n.ConvID != "d2" {
		t.Fatalf("got %+v, want d2's message: d1 is muted", n)
	}
}

func TestBurstCollapses(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{CollapseWindow: time.Hour})
	res := w.send("d1")
	if n := w.prov.next(t); n.Cursor != bobCursor(res) {
		t.Fatalf("first push %+v", n)
	}
	// Within the window, 49 more messages, then the window ends (a new pusher on the same
	// store: it has pushed nothing yet), and they go out as one notification.
	var last store.Appended
	for range 49 {
		last = w.send("d1")
	}
	w.stop()
	w.start(Options{CollapseWindow: time.Hour})
	n := w.prov.next(t)
	if n.Seq != 50 || n.Cursor != bobCursor(last) {
		t.Fatalf("collapsed push %+v, want seq 50", n)
	}
	w.stop() // writes its cursor: every message is dealt with, by two notifications
	if c := w.pushCursor(); c != bobCursor(last) {
		t.Fatalf("push cursor %d after the collapsed push, want %d", c, bobCursor(last))
	}
	if len(w.prov.got) != 0 {
		t.Fatalf("%d more notifications", len(w.prov.got))
	}
}

// pushCursor reads bob's phone's stored push cursor.
func (w *world) pushCursor() int64 {
	w.t.Helper()
	var tg store.PushTarget
	err := w.st.View(context.Background(), func(tx store.ReadTx) error {
		var err error
		tg, err = tx.PushTarget(context.Background(), "bob", "phone")
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return tg.Cursor
}

func TestRetryWithBackoffThenSuccess(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	var mu sync.Mutex
	calls := 0
	w.prov.setAnswer(func(n Notification) Result {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			return Result{Outcome: Retry, Status: 503, RetryAfter: 30 * time.Millisecond}
		}
		return Result{Outcome: Delivered, Status: 200}
	})
	w.send("d1")
	first := w.prov.next(t)
	t1 := time.Now()
	second := w.prov.next(t)
	third := w.prov.next(t)
	if first.ID != second.ID || second.ID != third.ID {
		t.Fatalf("retries changed the id: %s %s %s", first.ID, second.ID, third.ID)
	}
	if d := time.Since(t1); d < 30*time.Millisecond {
		t.Fatalf("the third attempt came %v after the second, before Retry-After", d)
	}
	w.send("d2")
	if n := w.prov.next(t); n.ConvID != "d2" {
		t.Fatalf("after the success, got %+v: the delivered push was sent again", n)
	}
}

func TestDeadTokenIsRemoved(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	w.prov.setAnswer(func(Notification) Result { return Result{Outcome: Unregistered, Status: 404, Reason: "UNREGISTERED"} })
	w.send("d1")
	w.prov.next(t)
	select {
	case reason := <-w.obs.removed:
		if reason != "UNREGISTERED" {
			t.Fatalf("removed for %q", reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dead token was not removed")
	}
	ctx := context.Background()
	var ts []store.PushTarget
	if err := w.st.View(ctx, func(tx store.ReadTx) error {
		var err error
		ts, err = tx.PushTargets(ctx, "bob")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ts) != 0 {
		t.Fatalf("targets after removal: %+v", ts)
	}
	w.send("d2")
	w.send("d1")
	select {
	case n := <-w.prov.got:
		t.Fatalf("pushed after the token died: %+v", n)
	default: // the sends' Notify found no target: nothing can be pushed
	}
}

func TestAPNsDeathBeforeRegistrationKeepsTarget(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	w.prov.setAnswer(func(n Notification) Result {
		if n.ConvID == "d1" { // dead since before bob's registration (RegisteredAt 1 ms)
			return Result{Outcome: Unregistered, Status: 410, Reason: "Unregistered", DeadSince: time.UnixMilli(0)}
		}
		return Result{Outcome: Delivered}
	})
	w.send("d1")
	w.prov.next(t)
	w.send("d2")
	if n := w.prov.next(t); n.ConvID != "d2" {
		t.Fatalf("got %+v, want d2 pushed: the target was registered after APNs saw it die", n)
	}
}

func TestRestartNeitherLosesNorRepeats(t *testing.T) {
	dir := t.TempDir()
	w := newWorld(t, dir, Options{})
	pushed := map[int64]string{} // cursor -> id
	for range 5 {
		w.send("d1")
		n := w.prov.next(t)
		pushed[n.Cursor] = n.ID
	}
	w.stop() // flushes its cursors, as a clean shutdown does
	for range 3 {
		w.send("d2") // while no pusher runs
	}
	w.start(Options{CollapseWindow: time.Nanosecond})
	n := w.prov.next(t)
	if _, again := pushed[n.Cursor]; again || n.ConvID != "d2" || n.Seq != 3 {
		t.Fatalf("after the restart got %+v; pushed before: %v", n, pushed)
	}
}

func TestNotificationIDIsAUUIDStablePerDeviceAndEvent(t *testing.T) {
	a, b := notificationID("bob", "phone", 5), notificationID("bob", "phone", 5)
	if a != b || a == notificationID("bob", "tablet", 5) || a == notificationID("bob", "phone", 6) {
		t.Fatal("ids are not stable per device and event")
	}
	if len(a) != 36 || a[14] != '5' || a[8] != '-' {
		t.Fatalf("%s is not a version-5 UUID", a)
	}
	if got := fmt.Sprint(len(collapseID("d_" + string(make([]byte, 200))))); got != "22" {
		t.Fatalf("collapse id length %s", got)
	}
}

func TestPreview(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{`{"text":"hi"}`, "hi"},
		{`{"text":"ééééé"}`, "ééé…"},
		{`{"url":"x"}`, ""},
		{`"just a string"`, ""},
	} {
		if got := preview([]byte(c.content), 3); got != c.want {
			t.Errorf("preview(%s) = %q, want %q", c.content, got, c.want)
		}
	}
}

// TestNotificationBody: an alert shows the preview if any, else says what kind of
// attachment the message carries, else "New message"; Data carries the kind.
func TestNotificationBody(t *testing.T) {
	for _, c := range []struct {
		n    Notification
		want string
	}{
		{Notification{Preview: "hi", Kind: "image"}, "hi"},
		{Notification{Kind: kinds[2]}, "Photo"},
		{Notification{Kind: kinds[3]}, "File"},
		{Notification{Kind: kinds[4]}, "Voice message"},
		{Notification{Kind: kinds[5]}, "Video"},
		{Notification{Kind: kinds[1]}, "New message"},
	} {
		if got := c.n.Body(); got != c.want {
			t.Errorf("Body of %+v = %q, want %q", c.n, got, c.want)
		}
	}
	if d := (Notification{Kind: "file"}).Data(); d["kind"] != "file" {
		t.Errorf("Data()[kind] = %q, want file", d["kind"])
	}
	if d := (Notification{}).Data(); d["kind"] != "" {
		t.Errorf("Data() of a text message has kind %q", d["kind"])
	}
}

// TestProviderDownThenBack: while the provider answers 503 to everything, the pusher stops
// after breakerAfter failures and only probes; when it answers again, every device is
// pushed once.
func TestProviderDownThenBack(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	const devices = 12
	ctx := context.Background()
	err := w.st.Update(ctx, func(tx store.Tx) error {
		for i := range devices {
			if err := tx.PutPushTarget(ctx, store.PushTarget{UserID: "bob", DeviceID: fmt.Sprint("dev", i), Provider: FCM, Token: fmt.Sprint("tok", i), RegisteredAt: 1}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.p.Reload(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	down := true
	w.prov.setAnswer(func(Notification) Result {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return Result{Outcome: Retry, Status: 503}
		}
		return Result{Outcome: Delivered, Status: 200}
	})
	w.send("d1")
	for range breakerAfter { // the failures that open the breaker (devices' backoff is 1 ms)
		w.prov.next(t)
	}
	start := time.Now()
	w.prov.next(t) // the first probe
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("an attempt %v after the breaker opened, before the first probe was due", d)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	probe := w.prov.next(t) // the second probe succeeds (after 2 s), and wakes every device
	delivered := map[string]bool{probe.ID: true}
	for len(delivered) < devices+1 { // bob's phone and the 12 devices
		n := w.prov.next(t)
		delivered[n.ID] = true
	}
	w.send("d2") // everything is delivered and nothing else: the next push is d2's
	for {
		n := w.prov.next(t)
		if n.ConvID == "d2" {
			break
		}
		if !delivered[n.ID] {
			t.Fatalf("a new notification for d1 after all were delivered: %+v", n)
		}
	}
}

// giveUpObs tells the test of pushes given up.
type giveUpObs struct {
	testObs
	gaveUp chan struct{}
}

func (o *giveUpObs) PushGaveUp(string) { o.gaveUp <- struct{}{} }

// TestGiveUpAfterTheLimit: a push that still fails for now past GiveUpAfter is dropped
// and the device's cursor moves on, so the next message is pushed.
func TestGiveUpAfterTheLimit(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	w.stop()
	obs := &giveUpObs{testObs: testObs{removed: make(chan string, 1)}, gaveUp: make(chan struct{}, 16)}
	w.obs = &obs.testObs
	w.pres = NewPresence(nil)
	w.p = New(Options{Store: w.st, Facts: fakeFacts{}, Providers: map[string]Provider{FCM: w.prov}, Presence: w.pres, Obs: obs,
		GiveUpAfter: time.Millisecond, CollapseWindow: time.Nanosecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.p.Run(ctx) }()
	w.stop = func() { cancel(); <-done }
	w.prov.setAnswer(func(n Notification) Result {
		if n.ConvID == "d1" {
			return Result{Outcome: Retry, Status: 503}
		}
		return Result{Outcome: Delivered}
	})
	res := w.send("d1")
	w.prov.next(t)
	select {
	case <-obs.gaveUp:
	case <-time.After(10 * time.Second):
		t.Fatal("not given up")
	}
	w.send("d2")
	if n := w.prov.next(t); n.ConvID != "d2" {
		t.Fatalf("after giving up, got %+v, want d2's message", n)
	}
	w.stop()
	if c := w.pushCursor(); c <= bobCursor(res) {
		t.Fatalf("cursor %d, want past the given-up event %d", c, bobCursor(res))
	}
}
