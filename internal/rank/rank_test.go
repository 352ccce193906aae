package rank

import (
	"math/rand/v2"
	"testing"
)

// TestMultisetAgreesWithAScan holds AtLeast and Len to a brute-force count over a slice,
// through random adds and removes of values with many duplicates (positions cluster).
func TestMultisetAgreesWithAScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var s Multiset
	var all []int64
	for i := range 20000 {
		if len(all) > 0 && r.IntN(3) == 0 {
			j := r.IntN(len(all))
			if !s.Remove(all[j]) {
				t.Fatalf("step %d: Remove(%d) found nothing", i, all[j])
			}
			all[j] = all[len(all)-1]
			all = all[:len(all)-1]
		} else {
			v := int64(r.IntN(50))
			s.Add(v)
			all = append(all, v)
		}
		if s.Len() != len(all) {
			t.Fatalf("step %d: Len %d, want %d", i, s.Len(), len(all))
		}
		if i%97 == 0 {
			for v := int64(-1); v <= 51; v++ {
				want := 0
				for _, x := range all {
					if x >= v {
						want++
					}
				}
				if got := s.AtLeast(v); got != want {
					t.Fatalf("step %d: AtLeast(%d) = %d, want %d", i, v, got, want)
				}
			}
		}
	}
	if s.Remove(1000) {
		t.Fatal("Remove of a value never added reported one")
	}
}

func BenchmarkAtLeast100k(b *testing.B) {
	var s Multiset
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		s.Add(int64(1_000_000 - r.IntN(5000)))
	}
	b.ResetTimer()
	for i := range b.N {
		s.AtLeast(int64(1_000_000 - i%5000))
	}
}
