//go:build unix

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOperatorCommandsKeepDataPrivate: `parley user add` on a data directory made 0755 by
// hand leaves it 0700 with every file 0600, and sets the process umask to 077 so that the
// files an engine creates later are private too (serve does the same).
func TestOperatorCommandsKeepDataPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runCmd(t, nil, "user", "add", "alice", "--data", dir); err != nil {
		t.Fatalf("user add: %v\n%s", err, stderr)
	}
	old := syscall.Umask(0o077) // reads the umask (and leaves it as the command set it)
	if old != 0o077 {
		t.Errorf("umask after the command is %#o, want 077", old)
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 || (d.IsDir() && perm != 0o700) {
			t.Errorf("%s: mode %v, want 0700 for a directory, 0600 for a file", path, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
