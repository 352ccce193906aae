package blobtest

import (
	"io"
	"testing"

	"github.com/parleychat/parley/internal/blob"
)

// pattern yields the same bytes for ever, cheaply, so that benchmarks time the store.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

// BenchmarkPut times Puts of size bytes to s, all under one key.
func BenchmarkPut(b *testing.B, s blob.Store, size int64) {
	b.SetBytes(size)
	for b.Loop() {
		if err := s.Put(b.Context(), "a/bench", io.LimitReader(pattern{}, size), size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenRead stores size bytes in s and times opening and reading them whole.
func BenchmarkOpenRead(b *testing.B, s blob.Store, size int64) {
	if err := s.Put(b.Context(), "a/bench", io.LimitReader(pattern{}, size), size); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	b.SetBytes(size)
	for b.Loop() {
		obj, err := s.Open(b.Context(), "a/bench")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(io.Discard, obj, buf); err != nil || n != size {
			b.Fatal(n, err)
		}
		_ = obj.Close()
	}
}
