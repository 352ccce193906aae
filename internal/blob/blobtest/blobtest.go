// Package blobtest is the conformance suite every blob.Store passes, as testing/fstest is
// for file systems: an implementation's test calls Run with a function that opens a fresh,
// empty store.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/blob"
)

// wait bounds every wait on another goroutine.
const wait = 10 * time.Second

// Run runs the suite's subtests against the stores open returns. Each subtest opens its
// own store, so open must return a fresh, empty one (for example under t.TempDir()); Run
// closes every store it opens.
func Run(t *testing.T, open func(t testing.TB) blob.Store) {
	tests := []struct {
		name string
		test func(t *testing.T, s blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"SizeAndModTime", testSizeAndModTime},
		{"ShortReader", testShortReader},
		{"LongReader", testLongReader},
		{"ReaderError", testReaderError},
		{"Replace", testReplace},
		{"Seek", testSeek},
		{"HTTPRange", testHTTPRange},
		{"OpenMissing", testOpenMissing},
		{"Delete", testDelete},
		{"InvalidKeys", testInvalidKeys},
		{"ValidKeys", testValidKeys},
		{"PutFile", testPutFile},
		{"PutFileMissing", testPutFileMissing},
		{"CancelMidPut", testCancelMidPut},
		{"CancelledBeforePut", testCancelledBeforePut},
		{"ConcurrentPuts", testConcurrentPuts},
		{"Close", testClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tt.test(t, s)
		})
	}
}

// gen returns size pseudo-random bytes streamed from seed, never held in memory.
func gen(seed uint64, size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}), size)
}

// genBytes returns the bytes gen(seed, size) yields.
func genBytes(seed uint64, size int64) []byte {
	b, err := io.ReadAll(gen(seed, size))
	if err != nil {
		panic(err)
	}
	return b
}

// sum returns the SHA-256 of what r yields.
func sum(r io.Reader) ([sha256.Size]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return [sha256.Size]byte(h.Sum(nil)), n, err
}

// mustPut stores b under key.
func mustPut(t testing.TB, s blob.Store, key string, b []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(b), err)
	}
}

// mustOpen opens key and closes it when the test ends.
func mustOpen(t testing.TB, s blob.Store, key string) blob.Object {
	t.Helper()
	obj, err := s.Open(t.Context(), key)
	if err != nil {
		t.Fatalf("Open(%q): %v", key, err)
	}
	t.Cleanup(func() { _ = obj.Close() })
	return obj
}

// wantBlob fails the test unless key holds exactly want.
func wantBlob(t testing.TB, s blob.Store, key string, want []byte) {
	t.Helper()
	obj := mustOpen(t, s, key)
	if obj.Size() != int64(len(want)) {
		t.Errorf("Open(%q).Size() = %d, want %d", key, obj.Size(), len(want))
	}
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%q holds %d bytes, not the %d stored", key, len(got), len(want))
	}
}

// wantMissing fails the test unless Open(key) reports ErrNotFound.
func wantMissing(t testing.TB, s blob.Store, key string) {
	t.Helper()
	obj, err := s.Open(t.Context(), key)
	if err == nil {
		_ = obj.Close()
		t.Fatalf("Open(%q) found a blob, want ErrNotFound", key)
	}
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(%q) = %v, want ErrNotFound", key, err)
	}
}

// writeFile writes b to a new file in a temporary directory and returns its path.
func writeFile(t testing.TB, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func testRoundTrip(t *testing.T, s blob.Store) {
	for _, size := range []int64{0, 1, 1 << 20, 20<<20 + 7} {
		key := "a/a_size" + strconv.FormatInt(size, 10)
		h := sha256.New()
		if err := s.Put(t.Context(), key, io.TeeReader(gen(uint64(size), size), h), size); err != nil {
			t.Fatalf("Put(%d bytes): %v", size, err)
		}
		got, n, err := sum(mustOpen(t, s, key))
		if err != nil {
			t.Fatalf("reading %d bytes back: %v", size, err)
		}
		if n != size || got != [sha256.Size]byte(h.Sum(nil)) {
			t.Errorf("stored %d bytes, read back %d bytes with another SHA-256", size, n)
		}
	}
}

func testSizeAndModTime(t *testing.T, s blob.Store) {
	before := time.Now().Add(-2 * time.Second)
	mustPut(t, s, "a/x", []byte("hello"))
	after := time.Now().Add(2 * time.Second)
	obj := mustOpen(t, s, "a/x")
	if obj.Size() != 5 {
		t.Errorf("Size() = %d, want 5", obj.Size())
	}
	if mt := obj.ModTime(); mt.Before(before) || mt.After(after) {
		t.Errorf("ModTime() = %v, want about %v", mt, time.Now())
	}
}

// putFails fails the test unless Put(key, r, size) fails and key then holds prev (or
// nothing, when prev is nil).
func putFails(t *testing.T, s blob.Store, key string, prev []byte, r io.Reader, size int64) {
	t.Helper()
	if err := s.Put(t.Context(), key, r, size); err == nil {
		t.Fatalf("Put(%q, size %d) with a reader of another length succeeded", key, size)
	}
	if prev == nil {
		wantMissing(t, s, key)
	} else {
		wantBlob(t, s, key, prev)
	}
}

func testShortReader(t *testing.T, s blob.Store) {
	putFails(t, s, "a/new", nil, gen(1, 99), 100)
	putFails(t, s, "a/new", nil, gen(1, 10), math.MaxInt64)
	prev := genBytes(2, 1000)
	mustPut(t, s, "a/old", prev)
	putFails(t, s, "a/old", prev, gen(3, 1<<20-1), 1<<20)
	putFails(t, s, "a/old", prev, gen(3, 0), 1)
}

func testLongReader(t *testing.T, s blob.Store) {
	putFails(t, s, "a/new", nil, gen(1, 101), 100)
	putFails(t, s, "a/new", nil, gen(1, 1), 0)
	prev := genBytes(2, 1000)
	mustPut(t, s, "a/old", prev)
	putFails(t, s, "a/old", prev, gen(3, 1<<20+1), 1<<20)
}

// errReader yields n bytes and then fails.
type errReader struct{ n int }

func (r *errReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("reader broke")
	}
	n := min(len(p), r.n)
	clear(p[:n])
	r.n -= n
	return n, nil
}

func testReaderError(t *testing.T, s blob.Store) {
	prev := []byte("earlier")
	mustPut(t, s, "a/old", prev)
	putFails(t, s, "a/old", prev, &errReader{n: 5000}, 10000)
	putFails(t, s, "a/new", nil, &errReader{n: 5000}, 10000)
}

func testReplace(t *testing.T, s blob.Store) {
	mustPut(t, s, "a/x", genBytes(1, 5000))
	mustPut(t, s, "a/x", []byte("short"))
	wantBlob(t, s, "a/x", []byte("short"))
	mustPut(t, s, "a/x", nil)
	wantBlob(t, s, "a/x", nil)
}

func testSeek(t *testing.T, s blob.Store) {
	data := genBytes(1, 10000)
	mustPut(t, s, "a/x", data)
	obj := mustOpen(t, s, "a/x")
	steps := []struct {
		offset int64
		whence int
		pos    int64 // where the seek lands
		read   int   // bytes to read there
	}{
		{100, io.SeekStart, 100, 10},
		{5, io.SeekCurrent, 115, 100},
		{-10, io.SeekEnd, 9990, 10},
		{0, io.SeekStart, 0, 1},
		{-1, io.SeekCurrent, 0, 10000},
		{0, io.SeekEnd, 10000, 0},
		{4096, io.SeekStart, 4096, 4096},
	}
	for _, st := range steps {
		pos, err := obj.Seek(st.offset, st.whence)
		if err != nil || pos != st.pos {
			t.Fatalf("Seek(%d, %d) = %d, %v; want %d", st.offset, st.whence, pos, err, st.pos)
		}
		got := make([]byte, st.read)
		if _, err := io.ReadFull(obj, got); err != nil {
			t.Fatalf("reading %d bytes at %d: %v", st.read, pos, err)
		}
		if !bytes.Equal(got, data[pos:pos+int64(st.read)]) {
			t.Errorf("%d bytes at %d differ from those stored", st.read, pos)
		}
	}
	if _, err := obj.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if n, err := obj.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("Read at the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func testOpenMissing(t *testing.T, s blob.Store) {
	wantMissing(t, s, "a/missing")
	mustPut(t, s, "a/x", []byte("x"))
	wantMissing(t, s, "a/x/y") // a blob is not a directory
	wantMissing(t, s, "a")     // nor is its parent a blob
}

func testDelete(t *testing.T, s blob.Store) {
	if err := s.Delete(t.Context(), "a/missing"); err != nil {
		t.Errorf("Delete of a missing blob = %v, want nil", err)
	}
	mustPut(t, s, "a/x", []byte("x"))
	mustPut(t, s, "a/y", []byte("y"))
	for range 2 {
		if err := s.Delete(t.Context(), "a/x"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		wantMissing(t, s, "a/x")
	}
	wantBlob(t, s, "a/y", []byte("y"))
	if err := s.Delete(t.Context(), "a"); err != nil {
		t.Errorf(`Delete("a"), the parent of a blob and no blob = %v, want nil`, err)
	}
	wantBlob(t, s, "a/y", []byte("y"))
}

// invalidKeys break CheckKey's rules, one each.
var invalidKeys = []string{
	"", "/a", "a/", "a//b", "/", "..", ".", "a/..", "../a", "a/../b", "a/./b", ".hidden",
	"a/.x", "a/.tmp", "A", "a/B", "a b", "a\x00", "a\\b", "a/é", "a:b", "a?", "a*",
	string(bytes.Repeat([]byte("a"), 300)), "a/" + string(bytes.Repeat([]byte("x"), 255)),
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	path := writeFile(t, []byte("x"))
	ctx := t.Context()
	for _, key := range invalidKeys {
		if err := blob.CheckKey(key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Put(ctx, key, bytes.NewReader([]byte("x")), 1); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.PutFile(ctx, key, path); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("PutFile(%q) = %v, want ErrInvalidKey", key, err)
		}
		if obj, err := s.Open(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Open(%q) = %v, want ErrInvalidKey", key, err)
			if err == nil {
				_ = obj.Close()
			}
		}
		if err := s.Delete(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

func testValidKeys(t *testing.T, s blob.Store) {
	long := "k/" + string(bytes.Repeat([]byte("x"), 127)) + "/" + string(bytes.Repeat([]byte("y"), 126))
	for _, key := range []string{
		"a/a_abcdefghijklmnopqrstuvwxyz", "t/a_234567abcdefghijklmnopqr", "q", "a.b", "a/b.c-d_e",
		"x/y/z", "a..b", "a/b.", long,
	} {
		if err := blob.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
			continue
		}
		mustPut(t, s, key, []byte(key))
		wantBlob(t, s, key, []byte(key))
	}
}

func testPutFile(t *testing.T, s blob.Store) {
	for _, size := range []int64{0, 3 << 20} {
		data := genBytes(uint64(size), size)
		path := writeFile(t, data)
		old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		key := "a/f" + strconv.FormatInt(size, 10)
		mustPut(t, s, key, []byte("earlier"))
		before := time.Now().Add(-2 * time.Second)
		if err := s.PutFile(t.Context(), key, path); err != nil {
			t.Fatalf("PutFile(%d bytes): %v", size, err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, s, key, data)
		if mt := mustOpen(t, s, key).ModTime(); mt.Before(before) {
			t.Errorf("ModTime() = %v, the file's, not when it was stored", mt)
		}
	}
}

func testPutFileMissing(t *testing.T, s blob.Store) {
	path := filepath.Join(t.TempDir(), "missing")
	if err := s.PutFile(t.Context(), "a/x", path); err == nil {
		t.Fatal("PutFile of a missing file succeeded")
	}
	wantMissing(t, s, "a/x")
}

// blockingReader yields half of its bytes, then blocks until ctx is done and yields the
// rest as if nothing had happened, so only a store that watches ctx notices.
type blockingReader struct {
	ctx     context.Context
	data    []byte
	blocked chan struct{} // closed when it starts to block
	off     int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.off >= len(r.data)/2 && r.blocked != nil {
		close(r.blocked)
		r.blocked = nil
		<-r.ctx.Done()
	}
	end := len(r.data)
	if r.off < len(r.data)/2 {
		end = len(r.data) / 2
	}
	n := copy(p, r.data[r.off:end])
	r.off += n
	return n, nil
}

func testCancelMidPut(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := &blockingReader{ctx: ctx, data: genBytes(1, 1<<20), blocked: make(chan struct{})}
	blocked := r.blocked
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "a/x", r, int64(len(r.data))) }()
	select {
	case <-blocked:
	case err := <-done:
		t.Fatalf("Put returned %v before reading half of its reader", err)
	case <-time.After(wait):
		t.Fatal("Put did not read half of its reader")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put cancelled midway = %v, want context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatal("Put did not return after its context was cancelled")
	}
	wantMissing(t, s, "a/x")
}

func testCancelledBeforePut(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, "a/x", bytes.NewReader([]byte("x")), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context = %v, want context.Canceled", err)
	}
	if err := s.PutFile(ctx, "a/x", writeFile(t, []byte("x"))); !errors.Is(err, context.Canceled) {
		t.Errorf("PutFile with a cancelled context = %v, want context.Canceled", err)
	}
	wantMissing(t, s, "a/x")
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	const writers, size = 8, 256 << 10
	sums := make(map[[sha256.Size]byte]bool)
	for i := range writers {
		h, _, _ := sum(gen(uint64(i), size))
		sums[h] = true
	}
	errs := make(chan error, 2*writers)
	for i := range writers {
		go func() { errs <- s.Put(t.Context(), "a/x", gen(uint64(i), size), size) }()
		go func() { errs <- readWhole(t.Context(), s, "a/x", sums, true) }()
	}
	for range 2 * writers {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(wait):
			t.Fatal("concurrent Puts did not finish")
		}
	}
	if err := readWhole(t.Context(), s, "a/x", sums, false); err != nil {
		t.Errorf("after concurrent Puts: %v", err)
	}
}

// readWhole returns an error unless key holds a blob whose SHA-256 is in sums, or is missing
// when missingOK.
func readWhole(ctx context.Context, s blob.Store, key string, sums map[[sha256.Size]byte]bool, missingOK bool) error {
	obj, err := s.Open(ctx, key)
	if missingOK && errors.Is(err, blob.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	h, n, err := sum(obj)
	if err != nil {
		return err
	}
	if !sums[h] || n != obj.Size() {
		return errors.New("a reader saw a blob that no writer wrote whole")
	}
	return nil
}

func testClose(t *testing.T, s blob.Store) {
	mustPut(t, s, "a/x", []byte("x"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	if err := s.Put(ctx, "a/y", bytes.NewReader([]byte("y")), 1); !errors.Is(err, blob.ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	if err := s.PutFile(ctx, "a/y", writeFile(t, []byte("y"))); !errors.Is(err, blob.ErrClosed) {
		t.Errorf("PutFile after Close = %v, want ErrClosed", err)
	}
	if obj, err := s.Open(ctx, "a/x"); !errors.Is(err, blob.ErrClosed) {
		t.Errorf("Open after Close = %v, want ErrClosed", err)
		if err == nil {
			_ = obj.Close()
		}
	}
	if err := s.Delete(ctx, "a/x"); !errors.Is(err, blob.ErrClosed) {
		t.Errorf("Delete after Close = %v, want ErrClosed", err)
	}
}
