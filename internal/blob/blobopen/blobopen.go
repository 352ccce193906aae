// Package blobopen opens the blob.Store a URL names, so that the server's configuration
// chooses the backend in one place.
package blobopen

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/disk"
)

// accepted names the forms Open understands, for its errors.
const accepted = `"" or "file://" (<data-dir>/blobs), "file:///absolute/path", "s3://bucket/prefix"`

// Open returns the store rawURL names:
//
//   - "" or "file://": files under <dataDir>/blobs, the default;
//   - "file:///abs/path": files under /abs/path;
//   - "s3://bucket/prefix": S3-compatible object storage (not built yet).
func Open(rawURL, dataDir string) (blob.Store, error) {
	if rawURL == "" {
		return openDefault(dataDir)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("blob store URL %q: %w; want %s", rawURL, err, accepted)
	}
	switch {
	case u.Scheme == "file" && u.Opaque == "" && u.Host == "" && u.User == nil && u.RawQuery == "" && u.Fragment == "":
		if u.Path == "" {
			return openDefault(dataDir)
		}
		if !filepath.IsAbs(u.Path) {
			break
		}
		return disk.Open(u.Path)
	case u.Scheme == "s3":
		return nil, errors.New("s3 blob store not built yet")
	}
	return nil, fmt.Errorf("blob store URL %q: want %s", rawURL, accepted)
}

// openDefault opens the disk store under dataDir.
func openDefault(dataDir string) (blob.Store, error) {
	if dataDir == "" {
		return nil, errors.New("blob store: the data directory is required for the default store")
	}
	return disk.Open(filepath.Join(dataDir, "blobs"))
}
