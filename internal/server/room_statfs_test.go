//go:build linux || darwin

package server

import (
	"path/filepath"
	"testing"
)

func TestDiskRoom(t *testing.T) {
	if err := diskRoom(t.TempDir())(); err != nil {
		t.Skipf("the test machine's temporary disk is nearly full: %v", err)
	}
	if err := diskRoom(filepath.Join(t.TempDir(), "missing"))(); err == nil {
		t.Fatal("no error for a directory that does not exist")
	}
}
