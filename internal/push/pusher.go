package push

// This file is the pusher itself: what it needs (Facts, Observer, Options), its state, New,
// Run and the run loop that starts the workers and the flush and sweep tickers, and the
// small API the server calls at registration (Check, VAPIDPublicKey).

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Facts is what the pusher needs from the chat rules: the badge and display names.
type Facts interface {
	// Badge returns the user's unread total, muted conversations left out.
	Badge(ctx context.Context, userID string) (int, error)
	// BadgeIn is Badge read in tx, the muted conversations given.
	BadgeIn(ctx context.Context, tx store.ReadTx, userID string, muted map[string]bool) (int, error)
	// Name returns the user's display name.
	Name(ctx context.Context, userID string) (string, error)
}

// Observer receives the pusher's measurements; the metrics package implements it. Every
// provider and reason it is given is from a fixed set (labels.go), never a service's text.
type Observer interface {
	PushSent(provider string, lag time.Duration) // accepted by the provider; lag from the event's commit
	PushFailed(provider, reason string)          // rejected for good (the notification is dropped)
	PushRetried(provider string)                 // a transient failure, to be tried again
	PushGaveUp(provider string)                  // still failing 24 h after the event: dropped
	PushCollapsed(n int)                         // notifications not sent because a later one of their conversation was
	PushTokenRemoved(provider, reason string)    // a dead token's target removed
}

type nopObserver struct{}

func (nopObserver) PushSent(string, time.Duration)  {}
func (nopObserver) PushFailed(string, string)       {}
func (nopObserver) PushRetried(string)              {}
func (nopObserver) PushGaveUp(string)               {}
func (nopObserver) PushCollapsed(int)               {}
func (nopObserver) PushTokenRemoved(string, string) {}

// Options configure a Pusher. Store, Facts and Providers are required.
type Options struct {
	Store     store.Store
	Facts     Facts
	Providers map[string]Provider // by provider name; targets of a provider not here are skipped
	Presence  *Presence           // nil: every device counts as offline
	// Grace is how long a live device (Presence) has to take an event before it is pushed
	// anyway. Default 3 s.
	Grace time.Duration
	// Settle is how long after an event an offline device waits before it is pushed: on
	// several nodes, the time it takes another node's news that the device connected there
	// (Feed) to arrive. 0 on one node, where presence is known at once.
	Settle time.Duration
	// CollapseWindow is the least time between two pushes to one device: the messages that
	// arrive meanwhile go out together, one notification per conversation. Default 1 s.
	CollapseWindow time.Duration
	// GiveUpAfter is how long after an event the pusher stops retrying its push. Default 24 h.
	GiveUpAfter time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between retries (with jitter,
	// and never shorter than the provider's Retry-After). Defaults 1 s and 1 h.
	MinBackoff, MaxBackoff time.Duration
	// Workers is how many users are worked on at once, each with its sends in turn. Default
	// 128. A worker whose request is unanswered after half a second hands its place to a new
	// one (up to 8 times Workers such requests at once), so slow services do not hold them.
	Workers int
	// SendTimeout bounds each provider request whole, its answer's body included. Default
	// DefaultSendTimeout (10 s).
	SendTimeout time.Duration
	// OriginShare is the most requests one push service a client chose (a Web Push origin)
	// may have under way at once; more wait for a slot. Default Workers/8 (at least 1).
	OriginShare int
	// Preview puts up to this many characters of a text message in its notification; 0
	// (the default) sends no content.
	Preview int
	// FlushEvery is how often advanced cursors are written to the store. Default 100 ms: a
	// crash repeats at most that much, and a repeat carries the same notification id.
	FlushEvery time.Duration
	// SweepEvery is how often every target is compared with its user's log, to find events
	// no wake-up announced (committed by another node). Default 30 s.
	SweepEvery time.Duration
	// VAPIDPublicKey is the Web Push application server key that clients subscribe with.
	VAPIDPublicKey string
	Now            func() time.Time
	Log            *slog.Logger
	Obs            Observer
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Grace, 3*time.Second)
	def(&o.CollapseWindow, time.Second)
	def(&o.GiveUpAfter, 24*time.Hour)
	def(&o.MinBackoff, time.Second)
	def(&o.MaxBackoff, time.Hour)
	def(&o.FlushEvery, 100*time.Millisecond)
	def(&o.SweepEvery, 30*time.Second)
	def(&o.SendTimeout, DefaultSendTimeout)
	if o.Workers <= 0 {
		o.Workers = 128
	}
	if o.OriginShare <= 0 {
		o.OriginShare = max(o.Workers/8, 1)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Obs == nil {
		o.Obs = nopObserver{}
	}
	if o.Presence == nil {
		o.Presence = NewPresence(o.Now)
	}
}

// Pusher pushes each registered device the events of its user's log that it did not take
// live, advancing the device's durable cursor behind the provider's acceptance. The zero
// value is not usable; call New, then Run.
type Pusher struct {
	o Options

	mu      sync.Mutex
	users   map[string]*userState
	ready   []string      // users to work on, in order
	readyC  chan struct{} // signalled when ready grows
	dirty   map[deviceKey]int64
	running bool
	leading atomic.Bool // run is working: this node pushes (Leading)

	origins  *originTable   // by origin: breakers and request slots
	wg       sync.WaitGroup // the workers of run, detached ones included
	detached atomic.Int64   // requests waited on apart from the workers (detachAfter)

	names nameCache // senders' display names
}

// userState is the pusher's memory of one user with targets.
type userState struct {
	id      string
	devices map[string]*deviceState
	queued  bool // in ready
	working bool // a worker has it
	again   bool // woken while a worker had it
	timer   *time.Timer
	wakeAt  time.Time // timer's time, zero when none
}

// deviceState is one target and where its pushes are.
type deviceState struct {
	t         store.PushTarget
	origin    string // where its requests go: an Origins provider's origin, else the provider's name
	limited   bool   // origin is one a client chose: at most OriginShare requests at once
	cursor    int64  // every event at or below it is dealt with (t.Cursor is the stored one)
	attempt   int    // failed attempts of the current notifications
	notBefore time.Time
	lastPush  time.Time
}

// New returns a pusher; Run starts it.
func New(o Options) *Pusher {
	o.defaults()
	return &Pusher{o: o, users: make(map[string]*userState), readyC: make(chan struct{}, 1), dirty: make(map[deviceKey]int64),
		origins: newOriginTable(o.OriginShare)}
}

// originOf returns where t's requests go, and whether a client chose it (Origins).
func (p *Pusher) originOf(t store.PushTarget) (string, bool) {
	if r, ok := p.o.Providers[t.Provider].(Origins); ok {
		if o := r.Origin(Target{Provider: t.Provider, Token: t.Token}); o != "" {
			return o, true
		}
	}
	return t.Provider, false
}

// Run loads every target, works until ctx ends, then writes the cursors it advanced. On a
// store shared by several nodes (store.Leader) it first waits to be the one pusher.
func (p *Pusher) Run(ctx context.Context) error {
	if _, ok := p.o.Store.(store.Leader); !ok {
		return p.run(ctx)
	}
	store.WhileLeading(ctx, p.o.Store, "push", p.o.MinBackoff, p.o.Log, p.run)
	return nil
}

func (p *Pusher) run(ctx context.Context) error {
	p.mu.Lock()
	p.users = make(map[string]*userState)
	p.ready = nil
	p.running = true
	p.mu.Unlock()
	p.leading.Store(true)
	defer p.leading.Store(false)
	defer func() {
		p.mu.Lock()
		p.running = false
		for _, u := range p.users {
			if u.timer != nil {
				u.timer.Stop()
			}
		}
		p.mu.Unlock()
		p.origins.stop()
	}()
	for { // the targets first: a store that is not there yet is waited for, not given up on
		err := p.sweep(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		p.o.Log.Error("push: read the registrations (trying again)", "err", err)
		if !sleep(ctx, p.o.MinBackoff) {
			return nil
		}
	}
	for range p.o.Workers {
		p.wg.Go(func() { p.work(ctx, &worker{}) })
	}
	flush := time.NewTicker(p.o.FlushEvery)
	sweep := time.NewTicker(p.o.SweepEvery)
	defer flush.Stop()
	defer sweep.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-flush.C:
			p.flush(ctx)
		case <-sweep.C:
			p.o.Presence.forget(max(10*p.o.Grace, time.Minute))
			p.origins.prune(p.o.Now(), 2*breakerMax)
			if err := p.sweep(ctx); err != nil && ctx.Err() == nil {
				p.o.Log.Error("push: sweep", "err", err)
			}
		}
	}
	p.wg.Wait()
	p.flush(context.WithoutCancel(ctx))
	return nil
}

// Validator is implemented by a provider that can tell a token it will never accept
// (a Web Push endpoint on a private address) at registration time.
type Validator interface {
	Validate(token string) error
}

// Check reports why a device's registration with provider could not be pushed to, or nil.
func (p *Pusher) Check(provider, token string) error {
	prov := p.o.Providers[provider]
	if prov == nil {
		return fmt.Errorf("provider %s is not configured on this server", provider)
	}
	if v, ok := prov.(Validator); ok {
		return v.Validate(token)
	}
	return nil
}

// VAPIDPublicKey returns the Web Push application server key, "" when Web Push is off.
func (p *Pusher) VAPIDPublicKey() string { return p.o.VAPIDPublicKey }

// Leading reports whether this pusher is the one that pushes (on a store several nodes
// share, the holder of the lead; on one node, while it runs).
func (p *Pusher) Leading() bool { return p.leading.Load() }
