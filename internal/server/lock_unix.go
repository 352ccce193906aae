//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockData takes an exclusive lock on dir/LOCK so that two servers never share one data
// directory: both would assign seqs and cursors from the same rows. It fails with
// ErrDataInUse while another holds it. On SQLite the operator commands (user add, token) do
// not take it and may run beside the server; on Pebble they take it (see cmd/parley). The
// lock ends with the process, so a SIGKILL never leaves a stale one.
func LockData(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is %w", dir, ErrDataInUse)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	return func() { f.Close() }, nil
}
