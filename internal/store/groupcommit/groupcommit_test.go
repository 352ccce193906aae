package groupcommit

import (
	"context"
	"errors"
	"slices"
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

// TestStartedAppendsRunInStartOrder: appends started one after another, before the writer
// runs, are applied in start order across batches; one whose context ended before the
// writer reached it is dropped (its Wait gives the context's error) without disturbing
// the others, and each Wait gives its own append's result.
func TestStartedAppendsRunInStartOrder(t *testing.T) {
	q := NewQueue(3, errClosed)
	var applied []int // written by the writer only
	dropped, cancel := context.WithCancel(context.Background())
	var pending []store.PendingAppend
	for i := range 10 {
		ctx := context.Background()
		if i == 4 {
			ctx = dropped
		}
		p, err := q.StartAppend(ctx, i%2 == 0, func(store.Tx) (store.Appended, error) {
			applied = append(applied, i)
			return store.Appended{Message: store.Message{Seq: int64(len(applied))}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	cancel() // append 4 is queued, and the writer has not reached it
	if _, err := pending[4].Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait of the dropped append = %v, want context.Canceled", err)
	}
	pending = slices.Delete(pending, 4, 5)
	runQueue(t, q, runAll)
	for i, p := range pending {
		res, err := p.Wait()
		if err != nil || res.Message.Seq != int64(i+1) {
			t.Fatalf("Wait of append %d = %+v, %v; want seq %d", i, res, err, i+1)
		}
	}
	if want := []int{0, 1, 2, 3, 5, 6, 7, 8, 9}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	if _, err := q.StartAppend(dropped, false, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("StartAppend with an ended context = %v, want context.Canceled", err)
	}
}
