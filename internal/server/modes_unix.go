//go:build unix

package server

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// privateData makes a data directory private to the user the server runs as: the
// directory and every directory under it 0700, every file without group and other
// permissions (0644 becomes 0600). The store holds every message and the secrets that sign tokens, yet an
// existing directory may have been made 0755 by hand, and engines create files with 0644
// unless the process umask says otherwise (cmd/parley sets 077 too; this covers the files
// that existed before, and library users such as tests).
//
// The engine is open during the walk and may delete files meanwhile (Pebble removes its
// obsolete OPTIONS, log and table files on a goroutine of its own), so a file or directory
// that is gone by the time the walk reaches it is skipped, not an error.
func privateData(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return gone(err)
		}
		if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
			return nil // chmod would follow a link out of the directory
		}
		info, err := d.Info()
		if err != nil {
			return gone(err)
		}
		mode := info.Mode().Perm() &^ 0o077
		if d.IsDir() {
			mode = 0o700
		}
		if mode == info.Mode().Perm() {
			return nil
		}
		return gone(os.Chmod(path, mode))
	})
}

// gone drops an error that says the file no longer exists.
func gone(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
