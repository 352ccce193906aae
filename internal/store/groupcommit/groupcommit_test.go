package groupcommit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

var errClosed = errors.New("closed")

// runQueue serves q with commit until the test ends.
func runQueue(t *testing.T, q *Queue, commit func([]*Request) ([]Outcome, error)) {
	done := make(chan struct{})
	go func() { defer close(done); q.Run(commit) }()
	t.Cleanup(func() { q.Close(); <-done })
}

// runAll is a commit that runs every fn with a nil Tx and commits.
func runAll(batch []*Request) ([]Outcome, error) {
	outs := make([]Outcome, len(batch))
	for i, r := range batch {
		outs[i] = r.Call(nil)
	}
	return outs, nil
}

func TestFailedCommitKeepsEachFnsOwnError(t *testing.T) {
	q := NewQueue(8, errClosed)
	commitErr := errors.New("disk on fire")
	runQueue(t, q, func(batch []*Request) ([]Outcome, error) {
		outs, _ := runAll(batch)
		return outs, commitErr
	})
	own := errors.New("fn's own")
	if err := q.Submit(context.Background(), func(store.Tx) error { return own }); !errors.Is(err, own) {
		t.Fatalf("failing fn got %v, want its own error", err)
	}
	if err := q.Submit(context.Background(), func(store.Tx) error { return nil }); !errors.Is(err, commitErr) {
		t.Fatalf("succeeding fn of an uncommitted batch got %v, want the commit error", err)
	}
}

func TestPanicReachesTheCaller(t *testing.T) {
	q := NewQueue(8, errClosed)
	runQueue(t, q, runAll)
	defer func() {
		if v := recover(); v != "boom" {
			t.Fatalf("recovered %v, want boom", v)
		}
	}()
	_ = q.Submit(context.Background(), func(store.Tx) error { panic("boom") })
	t.Fatal("Submit returned after a panicking fn")
}

func TestCancelledBeforeTheWriterNeverRuns(t *testing.T) {
	q := NewQueue(8, errClosed)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 1)
	result := make(chan error, 1)
	go func() { result <- q.Submit(ctx, func(store.Tx) error { ran <- struct{}{}; return nil }) }()
	deadline := time.Now().Add(5 * time.Second)
	for q.Waiting() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a condition with a deadline, not synchronising by sleep
	}
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit = %v, want context.Canceled", err)
	}
	runQueue(t, q, runAll) // the writer starts only now and must skip the abandoned request
	if err := q.Submit(context.Background(), func(store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("the fn of a cancelled request ran")
	default:
	}
}

func TestBatchesTakeWhatIsQueuedAndCloseDrains(t *testing.T) {
	q := NewQueue(4, errClosed)
	results := make(chan error, 10)
	for range 10 {
		go func() { results <- q.Submit(context.Background(), func(store.Tx) error { return nil }) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.Waiting() < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var sizes []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(func(b []*Request) ([]Outcome, error) { sizes = append(sizes, len(b)); return runAll(b) })
	}()
	if !q.Close() || q.Close() {
		t.Fatal("Close should report true once, then false")
	}
	<-done
	for range 10 {
		if err := <-results; err != nil {
			t.Fatalf("a request queued before Close: %v", err)
		}
	}
	if len(sizes) != 3 || sizes[0] != 4 || sizes[1] != 4 || sizes[2] != 2 {
		t.Fatalf("batch sizes %v, want [4 4 2]", sizes)
	}
	if err := q.Submit(context.Background(), func(store.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("Submit after Close = %v", err)
	}
}
