package push

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/protocol"
)

// originProvider is a provider whose targets name their origin (the token's part before
// the first '|', as a Web Push endpoint does), answering as each origin's script says.
type originProvider struct {
	mu      sync.Mutex // guards the fields below
	scripts map[string]func(ctx context.Context) Result
	in      map[string]int // requests under way, by origin
	most    map[string]int // the most under way at once, by origin
	started map[string]int // requests begun, by origin
	changed chan struct{}  // closed and replaced at every change
}

var _ Origins = (*originProvider)(nil)

func newOriginProvider() *originProvider {
	return &originProvider{scripts: map[string]func(context.Context) Result{}, in: map[string]int{}, most: map[string]int{},
		started: map[string]int{}, changed: make(chan struct{})}
}

func (f *originProvider) Origin(t Target) string { o, _, _ := strings.Cut(t.Token, "|"); return o }

func (f *originProvider) script(origin string, s func(ctx context.Context) Result) {
	f.mu.Lock()
	f.scripts[origin] = s
	f.mu.Unlock()
}

func (f *originProvider) Send(ctx context.Context, t Target, n Notification) Result {
	o := f.Origin(t)
	f.update(func() {
		f.in[o]++
		f.started[o]++
		f.most[o] = max(f.most[o], f.in[o])
	})
	defer f.update(func() { f.in[o]-- })
	f.mu.Lock()
	s := f.scripts[o]
	f.mu.Unlock()
	if s == nil {
		return Result{Outcome: Delivered, Status: 201}
	}
	return s(ctx)
}

func (f *originProvider) update(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	close(f.changed)
	f.changed = make(chan struct{})
}

// await waits until cond, read under the lock, holds.
func (f *originProvider) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second) // a bound on failure, not a synchronisation
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// poll waits until cond, a state of the pusher with no event to wait on, holds: it polls,
// and the deadline bounds only a failure.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// originWorld is a store with alice, users u00… (each with a device on an origin the test
// picks) in group g, and a victim in a direct conversation dv with alice, on origin "good".
type originWorld struct {
	st    store.Store
	prov  *originProvider
	p     *Pusher
	n     int
	views *atomic.Int64 // the pusher's read transactions
}

// countingStore counts the read transactions made through it.
type countingStore struct {
	store.Store
	views *atomic.Int64
}

func (c countingStore) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	c.views.Add(1)
	return c.Store.View(ctx, fn)
}

func newOriginWorld(t *testing.T, o Options, origins []string) *originWorld {
	t.Helper()
	st, err := pebble.Open(context.Background(), pebble.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	err = st.Update(ctx, func(tx store.Tx) error {
		for _, c := range []store.Conversation{{ID: "g", Type: protocol.TypeGroup, Name: "g", OwnerID: "alice", MembersCount: len(origins) + 1},
			{ID: "dv", Type: protocol.TypeDirect, MembersCount: 2}} {
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
		}
		add := func(uid, conv string, ord int, token string) error {
			if _, err := tx.User(ctx, uid); err != nil {
				if err := tx.CreateUser(ctx, store.User{ID: uid, Name: uid, TokenGen: 1}); err != nil {
					return err
				}
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: conv, UserID: uid, Ordinal: int64(ord)}); err != nil {
				return err
			}
			if token == "" {
				return nil
			}
			return tx.PutPushTarget(ctx, store.PushTarget{UserID: uid, DeviceID: "d", Provider: WebPush, Token: token, RegisteredAt: 1})
		}
		if err := add("alice", "g", 1, ""); err != nil {
			return err
		}
		if err := add("alice", "dv", 1, ""); err != nil {
			return err
		}
		if err := add("victim", "dv", 2, "good|victim"); err != nil {
			return err
		}
		for i, origin := range origins {
			if err := add(fmt.Sprintf("u%02d", i), "g", i+2, origin+"|"+fmt.Sprint(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &originWorld{st: st, prov: newOriginProvider(), views: new(atomic.Int64)}
	o.Store, o.Facts, o.Providers, o.CollapseWindow = countingStore{st, w.views}, fakeFacts{}, map[string]Provider{WebPush: w.prov}, time.Nanosecond
	w.p = New(o)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// send appends a message from alice to conv and tells the pusher.
func (w *originWorld) send(t *testing.T, conv string) {
	t.Helper()
	w.n++
	res, err := w.st.AppendMessage(context.Background(), store.Message{ConvID: conv, SenderID: "alice",
		ClientMsgID: fmt.Sprint("c", w.n), MsgID: fmt.Sprint("m", w.n), ContentType: 1, Content: []byte(`{"text":"hi"}`),
		CreatedAt: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Events {
		w.p.Notify(e.UserID, e.Cursor)
	}
}

// breakerOpen reports whether origin's breaker is open.
func (w *originWorld) breakerOpen(origin string) bool {
	w.p.origins.mu.Lock()
	o := w.p.origins.m[origin]
	w.p.origins.mu.Unlock()
	if o == nil {
		return false
	}
	o.br.mu.Lock()
	defer o.br.mu.Unlock()
	return o.br.open
}

func repeat(origin string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = origin
	}
	return out
}

// TestBreakerIsPerOrigin: six users whose origin answers 503 open that origin's breaker,
// and the victim on another origin is pushed at once, leaving the failing origin's breaker
// open. With one breaker per provider the victim could only go as that breaker's probe, and
// its success would have closed it.
func TestBreakerIsPerOrigin(t *testing.T) {
	w := newOriginWorld(t, Options{MinBackoff: time.Hour}, repeat("bad", 6))
	w.prov.script("bad", func(context.Context) Result { return Result{Outcome: Retry, Status: 503} })
	w.send(t, "g")
	poll(t, "the bad origin's breaker open", func() bool { return w.breakerOpen("bad") })
	w.send(t, "dv")
	w.prov.await(t, "the victim pushed", func() bool { return w.prov.started["good"] == 1 && w.prov.in["good"] == 0 })
	if !w.breakerOpen("bad") || w.breakerOpen("good") {
		t.Fatalf("after the victim's push: bad open %v, good open %v; want only bad", w.breakerOpen("bad"), w.breakerOpen("good"))
	}
}

// TestParkedDeviceDoesNotSpin: a device parked by its origin's breaker with more events
// waiting than one pass reads does not make the pusher read its log again and again until
// the probe: another pass is only for a device that got through this one.
func TestParkedDeviceDoesNotSpin(t *testing.T) {
	w := newOriginWorld(t, Options{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, []string{"bad"})
	w.prov.script("bad", func(context.Context) Result { return Result{Outcome: Retry, Status: 503} })
	for range batch + 6 {
		w.send(t, "g")
	}
	poll(t, "the bad origin's breaker open", func() bool { return w.breakerOpen("bad") })
	w.prov.mu.Lock()
	before, started := w.views.Load(), w.prov.started["bad"]
	w.prov.mu.Unlock()
	w.prov.await(t, "the first probe (after 1 s)", func() bool { return w.prov.started["bad"] > started })
	if n := w.views.Load() - before; n > 10 {
		t.Fatalf("%d reads of the log while the device was parked, want a few", n)
	}
}

// TestDeadlineCoversTheRequest: a provider request that does not end is cut at SendTimeout
// (its context's deadline) and counts as a transient failure, tried again.
func TestDeadlineCoversTheRequest(t *testing.T) {
	w := newOriginWorld(t, Options{SendTimeout: 50 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		[]string{"stuck"})
	var mu sync.Mutex
	var deadlines []time.Duration
	w.prov.script("stuck", func(ctx context.Context) Result {
		d, ok := ctx.Deadline()
		mu.Lock()
		if ok {
			deadlines = append(deadlines, time.Until(d))
		}
		mu.Unlock()
		<-ctx.Done() // the body that never ends
		return Result{Outcome: Retry, Reason: ctx.Err().Error()}
	})
	w.send(t, "g")
	w.prov.await(t, "a second attempt", func() bool { return w.prov.started["stuck"] >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(deadlines) == 0 || deadlines[0] > 50*time.Millisecond {
		t.Fatalf("deadlines %v, want one within SendTimeout", deadlines)
	}
}

// TestOriginShare: ten users on one slow origin hold at most its share of the requests
// (Workers/8 = 2 of 16); the others wait for a slot, the victim on another origin is pushed
// meanwhile, and once the slow origin answers, every user is pushed.
func TestOriginShare(t *testing.T) {
	w := newOriginWorld(t, Options{Workers: 16}, repeat("slow", 10))
	release := make(chan struct{})
	w.prov.script("slow", func(ctx context.Context) Result {
		select {
		case <-release:
			return Result{Outcome: Delivered, Status: 201}
		case <-ctx.Done():
			return Result{Outcome: Retry}
		}
	})
	w.send(t, "g")
	w.prov.await(t, "the share in flight", func() bool { return w.prov.in["slow"] == 2 })
	waiting := func() int {
		w.p.origins.mu.Lock()
		defer w.p.origins.mu.Unlock()
		return len(w.p.origins.m["slow"].waiting)
	}
	poll(t, "every other user waiting for a slot", func() bool { return waiting() == 8 })
	w.send(t, "dv")
	w.prov.await(t, "the victim pushed", func() bool { return w.prov.started["good"] == 1 })
	if got := w.prov.started["slow"]; got != 2 {
		t.Fatalf("%d requests started at the slow origin, want its share of 2", got)
	}
	close(release)
	w.prov.await(t, "every slow user pushed", func() bool { return w.prov.started["slow"] == 10 && w.prov.in["slow"] == 0 })
	if m := w.prov.most["slow"]; m != 2 {
		t.Fatalf("at most %d requests at once at the slow origin, want 2", m)
	}
}

// TestSlowOriginsDoNotHoldWorkers: twelve users each on a slow origin of its own, more than
// the pusher's four workers, all get their requests under way at once (the workers hand
// them over), and the victim is pushed while they are all held.
func TestSlowOriginsDoNotHoldWorkers(t *testing.T) {
	const slow = 12
	origins := make([]string, slow)
	release := make(chan struct{})
	for i := range origins {
		origins[i] = fmt.Sprint("slow", i)
	}
	w := newOriginWorld(t, Options{Workers: 4}, origins)
	for _, o := range origins {
		w.prov.script(o, func(ctx context.Context) Result {
			select {
			case <-release:
				return Result{Outcome: Delivered, Status: 201}
			case <-ctx.Done():
				return Result{Outcome: Retry}
			}
		})
	}
	held := func() int {
		n := 0
		for _, o := range origins {
			n += w.prov.in[o]
		}
		return n
	}
	w.send(t, "g")
	w.prov.await(t, "every slow request under way", func() bool { return held() == slow })
	w.send(t, "dv")
	w.prov.await(t, "the victim pushed", func() bool { return w.prov.started["good"] == 1 })
	w.prov.mu.Lock()
	h := held()
	w.prov.mu.Unlock()
	if h != slow {
		t.Fatalf("%d slow requests held when the victim was pushed, want %d", h, slow)
	}
	close(release)
	w.prov.await(t, "the slow requests done", func() bool { return held() == 0 })
	poll(t, "the detached workers ended", func() bool { return w.p.detached.Load() == 0 })
}

// TestOriginTablePrunes: an origin with nothing under way, nobody waiting and a quiet
// breaker is dropped, so that endpoints once registered leave nothing behind.
func TestOriginTablePrunes(t *testing.T) {
	ot := newOriginTable(1)
	now := time.Now()
	o := ot.acquire("a", true, "u1")
	if o == nil || ot.acquire("a", true, "u2") != nil {
		t.Fatal("want one slot at a share of 1")
	}
	ot.prune(now, time.Minute)
	if ot.len() != 1 {
		t.Fatal("pruned an origin with a request under way")
	}
	o.br.failed("u1", now, func(string) {})
	if woken := ot.release("a"); woken != "u2" {
		t.Fatalf("release woke %q, want the waiting u2", woken)
	}
	ot.prune(now, time.Minute)
	if ot.len() != 1 {
		t.Fatal("pruned an origin whose breaker failed a moment ago")
	}
	ot.prune(now.Add(2*time.Minute), time.Minute)
	if ot.len() != 0 {
		t.Fatal("kept an idle origin")
	}
}

func TestReasonLabels(t *testing.T) {
	for _, c := range []struct {
		provider string
		res      Result
		want     string
	}{
		{APNs, Result{Status: 410, Reason: "Unregistered"}, "Unregistered"},
		{APNs, Result{Status: 400, Reason: "SomethingNew"}, "other"},
		{FCM, Result{Status: 404, Reason: "UNREGISTERED"}, "UNREGISTERED"},
		{FCM, Result{Status: 400, Reason: "Bad Request"}, "other"},
		{WebPush, Result{Status: 400, Reason: "reason_1"}, "400"},
		{WebPush, Result{Status: 410, Reason: "push subscription has unsubscribed or expired."}, "410"},
		{WebPush, Result{Status: 302, Reason: "redirect to x not followed"}, "redirect"},
		{WebPush, Result{Status: 418, Reason: "teapot"}, "other"},
		{WebPush, Result{Reason: "webpush: endpoint address not allowed"}, "unsent"},
		{"hms", Result{Status: 400, Reason: "BadDeviceToken"}, "other"},
	} {
		if got := reasonLabel(c.provider, c.res); got != c.want {
			t.Errorf("reasonLabel(%s, %+v) = %q, want %q", c.provider, c.res, got, c.want)
		}
	}
	if providerLabel("webpush") != "webpush" || providerLabel("x") != "other" {
		t.Error("providerLabel")
	}
}
