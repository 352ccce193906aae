// Package disk is the default blob.Store: one file per blob under a root directory (the
// server's <data-dir>/blobs), each key a relative path below it.
//
// A blob is written to a temporary file in root/.tmp (a name no key can have, since keys
// never hold an element starting with "."), synced, and renamed into place, and its
// directory is synced before Put returns: a reader sees the old blob or the new one whole,
// and a crash leaves only temporary files, which Open removes. One process uses a root at a
// time.
package disk

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleychat/parley/internal/blob"
)

// tmpDir is the directory under the root that holds blobs being written.
const tmpDir = ".tmp"

// bufSize bounds the memory one Put copies through.
const bufSize = 256 << 10

// Store keeps blobs as files under a root directory. It is safe for concurrent use.
type Store struct {
	root   string
	tmp    string
	closed atomic.Bool
}

var _ blob.Store = (*Store)(nil)

// Open returns the store under root, creating root if need be and removing what writes a
// crash interrupted.
func Open(root string) (*Store, error) {
	if root == "" {
		return nil, errors.New("disk: the root directory is required")
	}
	s := &Store{root: filepath.Clean(root), tmp: filepath.Join(root, tmpDir)}
	if err := mkdirs(s.root); err != nil {
		return nil, ioErr("open", root, err)
	}
	if err := os.RemoveAll(s.tmp); err != nil {
		return nil, ioErr("open", root, err)
	}
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		return nil, ioErr("open", root, err)
	}
	if err := Sync(s.root); err != nil {
		return nil, ioErr("open", root, err)
	}
	return s, nil
}

// path returns the file that holds key, or why the call must fail.
func (s *Store) path(ctx context.Context, key string) (string, error) {
	if s.closed.Load() {
		return "", blob.ErrClosed
	}
	if err := blob.CheckKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// Put stores size bytes from r under key, durably, replacing any blob there. It copies
// through a bounded buffer and checks ctx between reads; a reader that blocks and ignores
// ctx blocks Put.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	path, err := s.path(ctx, key)
	if err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("disk: put %q: negative size %d", key, size)
	}
	f, err := os.CreateTemp(s.tmp, "put-")
	if err != nil {
		return ioErr("put", key, err)
	}
	err = fill(ctx, f, r, size)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = ioErr("put", key, cerr)
	}
	if err == nil {
		err = commit(ctx, f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("disk: put %q: %w", key, err)
	}
	return nil
}

// fill copies exactly size bytes from r to f and syncs f.
func fill(ctx context.Context, f *os.File, r io.Reader, size int64) error {
	buf := make([]byte, min(size, bufSize-1)+1)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Ask for one byte past size at most, to see a reader that yields too many.
		want := len(buf)
		if rem := size - n; rem < int64(want) {
			want = int(rem) + 1
		}
		m, rerr := r.Read(buf[:want])
		if n+int64(m) > size {
			return fmt.Errorf("the reader yields more than %d bytes", size)
		}
		if _, err := f.Write(buf[:m]); err != nil {
			return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
		}
		n += int64(m)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("reading: %w", rerr)
		}
	}
	if n != size {
		return fmt.Errorf("the reader yields %d bytes, not %d", n, size)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	return nil
}

// commit renames the synced temporary file tmp to path, creating path's directory, and
// syncs the directory so that the blob survives a crash.
func commit(ctx context.Context, tmp, path string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := mkdirs(dir); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	if err := Sync(dir); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	return nil
}

// PutFile stores the regular file at src under key. On the same file system it hard-links
// the file (so the caller must not change it afterwards); elsewhere it copies it.
func (s *Store) PutFile(ctx context.Context, key, src string) error {
	path, err := s.path(ctx, key)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("disk: put file %q: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("disk: put file %q: %s is not a regular file", key, src)
	}
	tmp := filepath.Join(s.tmp, "link-"+rand.Text())
	if err := os.Link(src, tmp); err != nil {
		return s.copyFile(ctx, key, src)
	}
	err = stamp(tmp)
	if err == nil {
		err = commit(ctx, tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk: put file %q: %w", key, err)
	}
	return nil
}

// copyFile is PutFile when src cannot be linked.
func (s *Store) copyFile(ctx context.Context, key, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("disk: put file %q: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("disk: put file %q: %w", key, err)
	}
	return s.Put(ctx, key, f, fi.Size())
}

// stamp sets a linked file's modification time to now, since ModTime is when the blob was
// stored, and syncs it.
func stamp(path string) error {
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	if err := Sync(path); err != nil {
		return fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	return nil
}

// Open returns the blob under key, or an error wrapping blob.ErrNotFound.
func (s *Store) Open(ctx context.Context, key string) (blob.Object, error) {
	path, err := s.path(ctx, key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, lookupErr("open", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, ioErr("open", key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("disk: open %q: %w", key, blob.ErrNotFound)
	}
	return &object{f: f, size: fi.Size(), mod: fi.ModTime()}, nil
}

// Delete removes the blob under key; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	path, err := s.path(ctx, key)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err == nil && fi.IsDir() {
		return nil // the parent of other keys, not a blob
	}
	if err == nil {
		err = os.Remove(path)
	}
	if err != nil {
		if err := lookupErr("delete", key, err); errors.Is(err, blob.ErrNotFound) {
			return nil
		}
		return ioErr("delete", key, err)
	}
	if err := Sync(filepath.Dir(path)); err != nil {
		return ioErr("delete", key, err)
	}
	return nil
}

// Close makes later calls fail with blob.ErrClosed. Objects already open stay readable.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// object is an open blob.
type object struct {
	f    *os.File
	size int64
	mod  time.Time
}

func (o *object) Read(p []byte) (int, error) {
	n, err := o.f.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	return n, err
}

func (o *object) Seek(offset int64, whence int) (int64, error) { return o.f.Seek(offset, whence) }
func (o *object) Close() error                                 { return o.f.Close() }
func (o *object) Size() int64                                  { return o.size }
func (o *object) ModTime() time.Time                           { return o.mod }

// ioErr wraps a failure of the file system in blob.ErrUnavailable.
func ioErr(op, key string, err error) error {
	return fmt.Errorf("disk: %s %q: %w: %w", op, key, blob.ErrUnavailable, err)
}

// lookupErr is ioErr, but wraps blob.ErrNotFound when err says the path is missing (a
// name in it is missing, or a blob where a directory should be).
func lookupErr(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("disk: %s %q: %w: %w", op, key, blob.ErrNotFound, err)
	}
	return ioErr(op, key, err)
}

// mkdirs creates dir and its missing parents, syncing the parent of each directory it
// creates so that the new directory survives a crash.
func mkdirs(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return Sync(parent)
}

// Sync fsyncs the file or directory at path: a directory, so that the names created,
// renamed or removed in it survive a crash; a file, so that its bytes do (an fsync through
// a descriptor opened for reading syncs the file's data too, on the systems Parley runs on).
func Sync(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
