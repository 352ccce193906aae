package push

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/parleychat/parley/internal/store"
)

// leadStore is a store several nodes share, as far as the pusher's lead goes: each Lead
// hands the test the term's lost channel, and each release is told on released. It has no
// targets; every other method is absent (nil Store).
type leadStore struct {
	store.Store
	terms    chan chan struct{}
	released chan struct{}
}

func (s *leadStore) Lead(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	lost := make(chan struct{})
	select {
	case s.terms <- lost:
		return lost, func() { s.released <- struct{}{} }, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (s *leadStore) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	return fn(noTargets{})
}

type noTargets struct{ store.ReadTx }

func (noTargets) PushTargetsAfter(context.Context, string, string, int) ([]store.PushTarget, error) {
	return nil, nil
}

// within returns what ch gives, failing the test after 10 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second): // a bound on failure, not a synchronisation
		t.Fatalf("no %s within 10 s", what)
		var zero T
		return zero
	}
}

// TestLeadLeavesNoGoroutine: a term that ends because the lead was lost, and one that ends
// because the pusher stops, are each released, and once Run returns nothing it started
// (the lead's watcher included) still runs.
func TestLeadLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	st := &leadStore{terms: make(chan chan struct{}), released: make(chan struct{}, 2)}
	p := New(Options{Store: st, Facts: fakeFacts{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	close(within(t, st.terms, "first lead"))
	within(t, st.released, "release of the lost lead")
	within(t, st.terms, "lead taken again")
	cancel()
	within(t, st.released, "release at stop")
	if err := within(t, done, "return of Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	goleak.VerifyNone(t, before)
}
