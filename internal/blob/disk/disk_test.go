package disk_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/blobtest"
	"github.com/parleychat/parley/internal/blob/disk"
)

// mustOpen opens a store under root and closes it when the test ends.
func mustOpen(tb testing.TB, root string) *disk.Store {
	tb.Helper()
	s, err := disk.Open(root)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t testing.TB) blob.Store { return mustOpen(t, t.TempDir()) })
}

// wantNoTemp fails the test unless the store under root holds no temporary files.
func wantNoTemp(t *testing.T, root string) {
	t.Helper()
	left, err := os.ReadDir(filepath.Join(root, ".tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("temporary file %s left behind", e.Name())
	}
}

func TestFailedPutsLeaveNoTemp(t *testing.T) {
	root := t.TempDir()
	s := mustOpen(t, root)
	ctx := t.Context()
	if err := s.Put(ctx, "a/x/y", bytes.NewReader([]byte("y")), 1); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tt := range []struct {
		name string
		put  func() error
	}{
		{"short", func() error { return s.Put(ctx, "a/s", bytes.NewReader([]byte("ab")), 3) }},
		{"long", func() error { return s.Put(ctx, "a/l", bytes.NewReader([]byte("abcd")), 3) }},
		{"cancelled", func() error { return s.Put(cancelled, "a/c", bytes.NewReader(nil), 0) }},
		{"onto a directory", func() error { return s.Put(ctx, "a/x", bytes.NewReader([]byte("x")), 1) }},
		{"file onto a directory", func() error { return s.PutFile(ctx, "a/x", writeFile(t, "x")) }},
		{"missing file", func() error { return s.PutFile(ctx, "a/m", filepath.Join(root, "nope")) }},
	} {
		if err := tt.put(); err == nil {
			t.Errorf("%s: Put succeeded", tt.name)
		}
	}
	wantNoTemp(t, root)
}

func TestPutOntoDirectoryIsUnavailable(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	if err := s.Put(t.Context(), "a/x/y", bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	err := s.Put(t.Context(), "a/x", bytes.NewReader(nil), 0)
	if !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Put onto a directory = %v, want ErrUnavailable", err)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	root := t.TempDir()
	s := mustOpen(t, root)
	if err := s.Put(t.Context(), "a/kept", bytes.NewReader([]byte("kept")), 4); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if err := os.WriteFile(filepath.Join(root, ".tmp", "put-crashed"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, root)
	wantNoTemp(t, root)
	obj, err := s.Open(t.Context(), "a/kept")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != "kept" {
		t.Errorf("after reopening, a/kept = %q, %v", b, err)
	}
}

func TestPutFileLinks(t *testing.T) {
	root := t.TempDir()
	s := mustOpen(t, root)
	src := filepath.Join(root, "upload") // the same file system
	if err := os.WriteFile(src, []byte("linked"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFile(t.Context(), "a/x", src); err != nil {
		t.Fatal(err)
	}
	a, errA := os.Stat(src)
	b, errB := os.Stat(filepath.Join(root, "a", "x"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !os.SameFile(a, b) {
		t.Error("PutFile copied a file it could have linked")
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const benchSize = 100 << 20

func BenchmarkPut100MiB(b *testing.B) {
	blobtest.BenchmarkPut(b, mustOpen(b, b.TempDir()), benchSize)
}

func BenchmarkOpenRead100MiB(b *testing.B) {
	blobtest.BenchmarkOpenRead(b, mustOpen(b, b.TempDir()), benchSize)
}
