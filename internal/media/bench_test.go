package media

import (
	"bytes"
	"runtime"
	"testing"
)

// runtimeMem is the process's total allocation, to measure what one call allocates.
type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}

// BenchmarkThumbnail12MP is the speed the server needs: a 4000×3000 photo-like JPEG (gradient
// and noise, quality 90) to a 320 px thumbnail and its preview, within 400 ms at p50.
func BenchmarkThumbnail12MP(b *testing.B) {
	src := mustJPEG(b, photo(4000, 3000), 90)
	info, err := Probe(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Thumbnail(bytes.NewReader(src), int64(len(src)), info, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
