package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
	// QueueLen bounds each subscription's queue of undelivered messages (DefaultQueueLen if
	// zero). When it is full, nats.go drops the arriving message (the newest) and counts it
	// as a slow-consumer event; the NATS server also drops messages for a connection that
	// reads too slowly.
	QueueLen int
}

// NATS is a Bus on core NATS (no JetStream: wake-ups need no persistence). After the first
// connection succeeds it reconnects forever and nats.go restores every subscription after a
// reconnect. While disconnected, Publish returns ErrUnavailable instead of buffering, so the
// caller knows this wake-up is lost and readers will catch up on their next sync.
type NATS struct {
	nc       *nats.Conn
	prefix   string
	queueLen int
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
	nc, err := nats.Connect(url,
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // no buffering while disconnected: Publish reports the loss
	)
	if err != nil {
		return nil, fmt.Errorf("%w: nats connect %s: %v", ErrUnavailable, url, err)
	}
	return &NATS{nc: nc, prefix: opts.Prefix, queueLen: opts.QueueLen}, nil
}

// Publish implements Bus.
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
	if err := b.nc.Publish(b.prefix+subject, data); err != nil {
		return b.translate(err)
	}
	return nil
}

// Subscribe implements Bus. nats.go calls handler from one goroutine per subscription, in
// arrival order.
func (b *NATS) Subscribe(subject string, handler func(data []byte)) (Subscription, error) {
	if err := checkSubscribe(subject, handler); err != nil {
		return nil, err
	}
	sub, err := b.nc.Subscribe(b.prefix+subject, func(m *nats.Msg) { handler(m.Data) })
	if err != nil {
		return nil, b.translate(err)
	}
	if err := sub.SetPendingLimits(b.queueLen, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, b.translate(err)
	}
	return natsSub{sub: sub, nc: b.nc}, nil
}

// Flush returns once the NATS server has processed everything this bus sent before it,
// the subscriptions made included: a message another connection publishes after Flush
// returns reaches them. (Subscribe alone only queues the subscription for the server.) It
// waits at most timeout, and returns an error wrapping ErrUnavailable while disconnected:
// the subscriptions are then restored on reconnection.
func (b *NATS) Flush(timeout time.Duration) error {
	if err := b.nc.FlushTimeout(timeout); err != nil {
		return b.translate(err)
	}
	return nil
}

// Close implements Bus. It closes the connection without draining: undelivered wake-ups are
// not worth waiting for.
func (b *NATS) Close() error {
	b.nc.Close()
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
	nc  *nats.Conn
}

// Unsubscribe implements Subscription.
func (s natsSub) Unsubscribe() error {
	if s.nc.IsClosed() {
		return nil
	}
	err := s.sub.Unsubscribe()
	if err == nil || errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return fmt.Errorf("bus: nats unsubscribe: %w", err)
}
