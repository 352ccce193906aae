package bus

import "testing"

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
