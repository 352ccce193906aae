//go:build unix

package server

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/auth"
)

// TestDataDirectoryIsPrivate: an existing data directory left 0755 with readable files is
// tightened when the server opens it, and the store's own files (SQLite's db, -wal, -shm;
// Pebble's directory and the files in it), the secrets and the lock end up 0600, even with a
// permissive umask. It runs on each engine.
func TestDataDirectoryIsPrivate(t *testing.T) {
	for _, tc := range []struct {
		engine string
		files  []string // the engine's own names (a trailing * matches a prefix), besides those every directory has
	}{
		{engine: "pebble", files: []string{"pebble", "MANIFEST-*", "OPTIONS-*", "*.log"}},
		{engine: "sqlite", files: []string{"parley.db", "parley.db-wal", "parley.db-shm"}},
	} {
		t.Run(tc.engine, func(t *testing.T) { testDataDirectoryIsPrivate(t, tc.engine, tc.files) })
	}
}

func testDataDirectoryIsPrivate(t *testing.T, engine string, files []string) {
	dir := filepath.Join(t.TempDir(), "data")
	mustMkdir(t, filepath.Join(dir, "old"))
	mustWrite(t, filepath.Join(dir, "notes.txt"), 0o644)
	mustWrite(t, filepath.Join(dir, "old", "backup.db"), 0o664)
	for _, d := range []string{dir, filepath.Join(dir, "old")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig(dir)
	cfg.Engine = engine
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Service.CreateUser(context.Background(), "alice", ""); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
		seen[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, name := range append(files, "LOCK", auth.AdminSecretFile, auth.SigningKeyFile, "notes.txt", "backup.db") {
		if !seenName(seen, name) {
			t.Errorf("no %s in the data directory (saw %v)", name, seen)
		}
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode is subject to the umask
		t.Fatal(err)
	}
}

// seenName reports whether seen holds name, where a leading or trailing * in name matches
// any suffix or prefix.
func seenName(seen map[string]bool, name string) bool {
	prefix, isPrefix := strings.CutSuffix(name, "*")
	suffix, isSuffix := strings.CutPrefix(name, "*")
	if !isPrefix && !isSuffix {
		return seen[name]
	}
	for s := range seen {
		if isPrefix && strings.HasPrefix(s, prefix) || isSuffix && strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

// TestPrivateDataWhileFilesComeAndGo: the engine may create and delete files while the walk
// runs (Pebble removes its obsolete OPTIONS, log and table files on a goroutine of its own
// after the open). A file gone between the listing and its chmod is no error: a restart once
// failed with "lstat .../pebble/OPTIONS-000003: no such file or directory".
func TestPrivateDataWhileFilesComeAndGo(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "pebble")
	mustMkdir(t, sub)
	const files = 500
	for i := range files {
		mustWrite(t, filepath.Join(sub, fmt.Sprintf("f%03d", i)), 0o644)
	}
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() { // removes each file and makes it again, in turn, until stopped
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := filepath.Join(sub, fmt.Sprintf("f%03d", i%files))
			_ = os.Remove(name)
			_ = os.WriteFile(name, nil, 0o644)
		}
	}()
	defer func() { close(stop); <-churned }()
	for i := range 100 {
		if err := privateData(dir); err != nil {
			t.Fatalf("walk %d: %v", i, err)
		}
	}
}
