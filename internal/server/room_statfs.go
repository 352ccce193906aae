//go:build linux || darwin

package server

import (
	"fmt"
	"syscall"
)

// minFreeBytes is the free space the data directory's disk needs before a write failure
// stops being reported by /healthz: enough for SQLite's WAL to grow and checkpoint, or
// Pebble to flush and compact, for a while, rather than for one more small message.
const minFreeBytes = 64 << 20

// diskRoom returns chat's Options.Room for a data directory: room means at least
// minFreeBytes available to this (unprivileged) user on its filesystem.
func diskRoom(dir string) func() error {
	return func() error {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(dir, &fs); err != nil {
			return fmt.Errorf("statfs %s: %w", dir, err)
		}
		if free := uint64(fs.Bavail) * uint64(fs.Bsize); free < minFreeBytes {
			return fmt.Errorf("%d bytes free on the data directory's disk, fewer than %d", free, minFreeBytes)
		}
		return nil
	}
}
