package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parleychat/parley/internal/redact"
)

// NATSOptions configure a NATS bus. The zero value is ready to use. They are a struct, not
// variadic option functions, following the project's convention (options are structs).
type NATSOptions struct {
	// Prefix, if set, is put before every subject on the wire ("<prefix>.parley.user.x"), so
	// several deployments (or tests) can share one NATS server without seeing each other's
	// messages. Callers keep using unprefixed subjects. It must be a valid subject. The prefix
	// is an option of the transport rather than part of UserSubject and ConvSubject because
	// only a shared transport needs it: callers never see it, and the memory bus has none.
	Prefix string
	// Name is the connection name shown by the NATS server's monitoring (for example the node).
	Name string
	// ConnectTimeout bounds the first connection (2 seconds if zero).
	ConnectTimeout time.Duration
	// QueueLen bounds each delivery queue of undelivered messages (DefaultQueueLen if
	// zero); the subscriptions share natsWorkers queues, by subject. When one is full,
	// nats.go drops the arriving message (the newest) and counts it as a slow-consumer
	// event; the NATS server also drops messages for a connection that reads too slowly.
	QueueLen int
	// OnLost, if set, is called (on the bus's publishing goroutine) for each publish that
	// Publish accepted and nats.go then refused: the connection went in between. Publish
	// reports a connection already lost itself.
	OnLost func()
	// NoEcho keeps this bus's own publishes from its own subscriptions (NATS's no-echo): a
	// node hands its events to its own connections directly, so their echo from the server
	// would only be decoded and dropped, one per recipient of every send.
	NoEcho bool
	// Auth is how the bus authenticates to the server and verifies it (credential files,
	// TLS); user and password or a token go in the URL.
	Auth NATSAuth
}

// natsWorkers is how many goroutines deliver a NATS bus's messages to its handlers. A
// subscription's messages all go through one of them (by subject), in arrival order. A
// node subscribes to one subject per user online, so nats.go's own delivery (a goroutine
// for each subscription) would hold 100,000 goroutines for 100,000 users.
const natsWorkers = 16

// NATS is a Bus on core NATS (no JetStream: wake-ups need no persistence). After the first
// connection succeeds it reconnects forever and nats.go restores every subscription after a
// reconnect. While disconnected, Publish returns ErrUnavailable instead of buffering, so the
// caller knows this wake-up is lost and readers will catch up on their next sync.
type NATS struct {
	nc     *nats.Conn
	prefix string

	seed     maphash.Seed                // of the queue a subject's messages go through
	queues   [natsWorkers]chan *nats.Msg // each read by one worker goroutine
	stop     chan struct{}               // closed by Close: the workers end
	stopOnce sync.Once

	mu       sync.RWMutex                        // guards handlers
	handlers map[*nats.Subscription]func([]byte) // until Unsubscribe

	// Publishes go out in bursts (see Publish): queued under pubMu, handed to nats.go by
	// one goroutine, woken through pubWake, under sendMu (which also orders Flush's own
	// hand-over with it).
	pubMu   sync.Mutex
	pubs    []natsPub
	pubWake chan struct{}
	sendMu  sync.Mutex
	onLost  func() // NATSOptions.OnLost, or nothing
	noEcho  bool   // NATSOptions.NoEcho
}

// maxQueuedPublishes bounds the publishes waiting for the publishing goroutine: past it
// (a connection that stalls while it still counts as connected) Publish refuses, as it
// does while disconnected, rather than hold ever more memory.
const maxQueuedPublishes = 1 << 16

// natsPub is a queued publish: the subject on the wire and a copy of the data.
type natsPub struct {
	subject string
	data    []byte
}

var _ Bus = (*NATS)(nil)

// OpenNATS connects to the NATS server(s) at url (a comma-separated list is allowed). It fails
// if no server answers within opts.ConnectTimeout, so a misconfigured node stops at start.
func OpenNATS(url string, opts NATSOptions) (*NATS, error) {
	if opts.Prefix != "" {
		if err := ValidateSubject(opts.Prefix); err != nil {
			return nil, fmt.Errorf("bus: prefix: %w", err)
		}
		opts.Prefix += "."
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 2 * time.Second
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	options := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // no buffering while disconnected: Publish reports the loss
	}
	if opts.NoEcho {
		options = append(options, nats.NoEcho())
	}
	auth, err := opts.Auth.options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(options, auth...)...)
	if err != nil {
		return nil, connectError(url, err)
	}
	b := &NATS{nc: nc, prefix: opts.Prefix, seed: maphash.MakeSeed(), stop: make(chan struct{}),
		handlers: make(map[*nats.Subscription]func([]byte)), pubWake: make(chan struct{}, 1), onLost: opts.OnLost, noEcho: opts.NoEcho}
	if b.onLost == nil {
		b.onLost = func() {}
	}
	for i := range b.queues {
		b.queues[i] = make(chan *nats.Msg, opts.QueueLen)
		go b.deliver(b.queues[i])
	}
	go b.publisher()
	return b, nil
}

// connectError explains why the first connection to url failed, with url's passwords and
// tokens masked (the URL, and anything nats.go copied of it).
func connectError(url string, err error) error {
	shown := redact.URL(url)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return redact.Error(fmt.Errorf("%w: nats %s: %v (check the user, password or token in the URL, or the creds or nkey file)",
			ErrRefused, shown, err), url)
	}
	return redact.Error(fmt.Errorf("%w: nats connect %s: %v", ErrUnavailable, shown, err), url)
}

// OnReconnect has f called (on a goroutine of nats.go's) each time the connection comes
// back after a loss, once nats.go has sent the subscriptions again. Whatever was published
// while it was down is lost to this node's subscribers: f is where a caller makes up for it.
// A later call replaces f.
func (b *NATS) OnReconnect(f func()) { b.nc.SetReconnectHandler(func(*nats.Conn) { f() }) }

// NoEcho reports whether the bus keeps its own publishes from its own subscriptions
// (NATSOptions.NoEcho): a message of its own that reaches it was then published again by
// someone else.
func (b *NATS) NoEcho() bool { return b.noEcho }

// deliver calls the handler of each message of queue, until Close. A message of a
// subscription that ended meanwhile finds no handler and is dropped.
func (b *NATS) deliver(queue chan *nats.Msg) {
	for {
		select {
		case <-b.stop:
			return
		case m := <-queue:
			b.mu.RLock()
			h := b.handlers[m.Sub]
			b.mu.RUnlock()
			if h != nil {
				h(m.Data)
			}
		}
	}
}

// Publish implements Bus. It queues a copy of the message for the bus's publishing
// goroutine, which hands everything queued to nats.go at once: a commit answers a batch of
// sends together, and their wake-ups, published from as many goroutines, then reach the
// NATS server in one write instead of one each, and its subscribers in fewer writes too
// (on three nodes the server spent most of its CPU in a system call and a wake-up per
// message). Order per publisher is kept. A message nats.go refuses once queued (the
// connection went in between) is lost as any bus message may be, and told to OnLost.
func (b *NATS) Publish(ctx context.Context, subject string, data []byte) error {
	if err := checkPublish(ctx, subject); err != nil {
		return err
	}
	if b.nc.IsClosed() {
		return ErrClosed
	}
	if !b.nc.IsConnected() {
		return fmt.Errorf("%w: nats %s", ErrUnavailable, b.nc.Status())
	}
	if len(data) > int(b.nc.MaxPayload()) {
		return fmt.Errorf("bus: nats: %w", nats.ErrMaxPayload)
	}
	b.pubMu.Lock()
	if len(b.pubs) >= maxQueuedPublishes {
		b.pubMu.Unlock()
		return fmt.Errorf("%w: nats: %d publishes queued for a connection that does not take them", ErrUnavailable, maxQueuedPublishes)
	}
	first := len(b.pubs) == 0
	b.pubs = append(b.pubs, natsPub{b.prefix + subject, append([]byte(nil), data...)})
	b.pubMu.Unlock()
	if first {
		select {
		case b.pubWake <- struct{}{}:
		default:
		}
	}
	return nil
}

// publisher sends what Publish queued, until Close.
func (b *NATS) publisher() {
	for {
		select {
		case <-b.stop:
			return
		case <-b.pubWake:
		}
		// The goroutines one commit woke publish within microseconds of each other: let
		// those that are runnable queue theirs before the burst goes.
		runtime.Gosched()
		b.send()
	}
}

// send hands every queued publish to nats.go, in queue order.
func (b *NATS) send() {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	b.pubMu.Lock()
	ps := b.pubs
	b.pubs = nil
	b.pubMu.Unlock()
	for _, p := range ps {
		if err := b.nc.Publish(p.subject, p.data); err != nil {
			b.onLost()
		}
	}
}

// Subscribe implements Bus. The handler is called from one of the bus's natsWorkers
// goroutines, the one for subject, in arrival order: a slow handler delays the other
// subjects that share its goroutine.
func (b *NATS) Subscribe(subject string, handler func(data []byte)) (Subscription, error) {
	if err := checkSubscribe(subject, handler); err != nil {
		return nil, err
	}
	queue := b.queues[maphash.String(b.seed, subject)%natsWorkers]
	b.mu.Lock() // until the handler is known: a worker may get the first message at once
	defer b.mu.Unlock()
	sub, err := b.nc.ChanSubscribe(b.prefix+subject, queue)
	if err != nil {
		return nil, b.translate(err)
	}
	b.handlers[sub] = handler
	return natsSub{sub: sub, b: b}, nil
}

// Flush returns once the NATS server has processed everything this bus sent before it,
// the subscriptions made included: a message another connection publishes after Flush
// returns reaches them. (Subscribe alone only queues the subscription for the server.) It
// waits at most timeout, and returns an error wrapping ErrUnavailable while disconnected:
// the subscriptions are then restored on reconnection.
func (b *NATS) Flush(timeout time.Duration) error {
	b.send()
	if err := b.nc.FlushTimeout(timeout); err != nil {
		return b.translate(err)
	}
	return nil
}

// Close implements Bus. It closes the connection without draining: undelivered wake-ups are
// not worth waiting for.
func (b *NATS) Close() error {
	b.nc.Close()
	b.stopOnce.Do(func() { close(b.stop) })
	return nil
}

// Healthy returns nil while connected to a NATS server, and an error wrapping ErrUnavailable
// (or ErrClosed) that names the connection status otherwise. It is meant for /healthz.
func (b *NATS) Healthy() error {
	switch {
	case b.nc.IsClosed():
		return ErrClosed
	case !b.nc.IsConnected():
		return fmt.Errorf("%w: nats %s", ErrUnavailable, b.nc.Status())
	}
	return nil
}

func (b *NATS) translate(err error) error {
	switch {
	case errors.Is(err, nats.ErrConnectionClosed):
		return ErrClosed
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return fmt.Errorf("bus: nats: %w", err)
}

type natsSub struct {
	sub *nats.Subscription
	b   *NATS
}

// Unsubscribe implements Subscription. The handler is forgotten first, so that no message
// still queued for it is delivered after Unsubscribe returns.
func (s natsSub) Unsubscribe() error {
	s.b.mu.Lock()
	delete(s.b.handlers, s.sub)
	s.b.mu.Unlock()
	if s.b.nc.IsClosed() {
		return nil
	}
	err := s.sub.Unsubscribe()
	if err == nil || errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return fmt.Errorf("bus: nats unsubscribe: %w", err)
}
