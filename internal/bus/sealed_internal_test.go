package bus

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The replay window accepts each index once, in any order within the window, and refuses
// what fell behind it.
func TestWindowShard(t *testing.T) {
	var w windowShard
	steps := []struct {
		i    uint64
		want bool
	}{
		{5, true}, {5, false}, {3, true}, {3, false}, {4, true}, {100, true}, {6, true}, {6, false},
		{5000, true}, {100, false}, // 100 is more than a window behind 5000
		{5000 - (windowWords-1)*64 + 1, true}, {5001, true}, {4999, true}, {4999, false},
		{1 << 40, true}, {5001, false}, {1<<40 - 1, true}, {1 << 40, false},
	}
	for _, s := range steps {
		if got := w.accept(s.i); got != s.want {
			t.Fatalf("accept(%d) = %v, want %v", s.i, got, s.want)
		}
	}
}

type fixedKeys []Key

func (k fixedKeys) BusKeys(context.Context) ([]Key, error) { return k, nil }

// The record of a sender is forgotten once it has been silent for three windows: the
// replay state stays bounded by the senders heard recently.
func TestSealedForgetsSilentSenders(t *testing.T) {
	inner := NewMemory(MemoryOptions{})
	defer inner.Close()
	keys := fixedKeys{{ID: 1, Secret: make([]byte, KeySize)}}
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	recv, err := Seal(context.Background(), inner, keys, SealOptions{Now: now, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	got := make(chan struct{}, 1)
	if _, err := recv.Subscribe("t.forget", func([]byte) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	send, err := Seal(context.Background(), inner, keys, SealOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if err := send.Publish(context.Background(), "t.forget", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing arrived")
	}
	recv.forgetSenders()
	if n := len(*recv.senders.Load()); n != 1 {
		t.Fatalf("%d senders remembered, want 1", n)
	}
	skew.Store(int64(3*time.Second + time.Millisecond))
	recv.forgetSenders()
	if n := len(*recv.senders.Load()); n != 0 {
		t.Fatalf("%d senders remembered three windows later, want 0", n)
	}
}
