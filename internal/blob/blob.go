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
	"fmt"
	"io"
	"strings"
	"time"
)

// Sentinel errors. Implementations wrap them with %w.
var (
	// ErrNotFound: there is no blob under the key.
	ErrNotFound = errors.New("blob: not found")
	// ErrUnavailable: the storage failed (I/O error, unreachable server). Nothing half-written
	// is visible; the caller may retry.
	ErrUnavailable = errors.New("blob: unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("blob: store closed")
	// ErrInvalidKey: the key breaks the rules of CheckKey.
	ErrInvalidKey = errors.New("blob: invalid key")
)

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 256

// CheckKey returns an error wrapping ErrInvalidKey unless key is one a Store accepts: 1 to
// MaxKeyLen bytes of [a-z0-9_/.-], split by "/" into non-empty elements (so no leading,
// trailing or doubled slash), none of which starts with "." (so neither "." nor "..", and
// no hidden names, which stores may keep for themselves). Every Store calls it first.
//
// One rule CheckKey cannot see is the caller's: a key must not also be a parent of another
// key in use ("a/x" and "a/x/y" both), since a store on a file system keeps keys as paths.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("_/.-", c) >= 0) {
			return fmt.Errorf("%w: %q has byte %#x, outside [a-z0-9_/.-]", ErrInvalidKey, key, c)
		}
	}
	for elem := range strings.SplitSeq(key, "/") {
		if elem == "" || elem[0] == '.' {
			return fmt.Errorf("%w: %q has an element that is empty or starts with \".\"", ErrInvalidKey, key)
		}
	}
	return nil
}

// Store keeps blobs under keys. Keys are short paths of [a-z0-9_/.-], without a leading
// slash or "..", as CheckKey defines them: the caller names blobs ("a/<id>" for an
// attachment's bytes, "t/<id>" for its thumbnail). Every method refuses an invalid key with
// an error wrapping ErrInvalidKey, and after Close fails with ErrClosed. A Store is safe
// for concurrent use; concurrent Puts to one key leave one of the blobs whole.
type Store interface {
	// Put stores size bytes read from r under key, replacing any blob there. When it returns
	// nil the blob is durable and readable whole; when it fails, nothing of it is readable
	// (an earlier blob under key may still be). A reader that yields other than size bytes
	// is an error, and so is a ctx done before the blob is in place (wrapping ctx.Err()).
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutFile stores the file at path under key, as Put would, and may take the file over
	// (a hard link, for a store on the same file system) rather than copy it: the caller
	// must not change the file afterwards, though it may remove its own name for it.
	PutFile(ctx context.Context, key, path string) error
	// Open returns the blob under key for reading, or ErrNotFound.
	Open(ctx context.Context, key string) (Object, error)
	// Delete removes the blob under key. Deleting a missing blob is not an error.
	Delete(ctx context.Context, key string) error
	// Close releases the store. Closing it again is not an error.
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
