// Package blob stores attachments' bytes: one interface, Store, with one implementation per
// kind of storage (files under the data directory, S3-compatible object storage) and one
// conformance suite, blobtest, that every implementation passes.
//
// A blob is written whole and then visible whole: a reader never sees a half-written one,
// and Put returns only once the blob is durable, so that a message may name it.
package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sentinel errors. Implementations wrap them with %w.
var (
	// ErrNotFound: there is no blob under the key.
	ErrNotFound = errors.New("blob: not found")
	// ErrUnavailable: the storage failed (I/O error, unreachable server). Nothing half-written
	// is visible; the caller may retry.
	ErrUnavailable = errors.New("blob: unavailable")
)

// Store keeps blobs under keys. Keys are short paths of [a-z0-9_/.-], without a leading
// slash or "..": the caller names blobs ("a/<id>" for an attachment's bytes, "t/<id>" for
// its thumbnail).
type Store interface {
	// Put stores size bytes read from r under key, replacing any blob there. When it returns
	// nil the blob is durable and readable whole; when it fails, nothing of it is readable
	// (an earlier blob under key may still be). A reader that yields other than size bytes
	// is an error.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutFile stores the file at path under key, as Put would, and may take the file over
	// (a hard link, for a store on the same file system) rather than copy it: the caller
	// must not change the file afterwards, though it may remove its own name for it.
	PutFile(ctx context.Context, key, path string) error
	// Open returns the blob under key for reading, or ErrNotFound.
	Open(ctx context.Context, key string) (Object, error)
	// Delete removes the blob under key. Deleting a missing blob is not an error.
	Delete(ctx context.Context, key string) error
	// Close releases the store.
	Close() error
}

// Object is one blob opened for reading: seekable, so that an HTTP range request reads only
// its range.
type Object interface {
	io.ReadSeekCloser
	// Size is the blob's length in bytes.
	Size() int64
	// ModTime is when the blob was stored.
	ModTime() time.Time
}
