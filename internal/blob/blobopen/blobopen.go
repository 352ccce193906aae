// Package blobopen opens the blob.Store a URL names, so that the server's configuration
// chooses the backend in one place.
package blobopen

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/disk"
	"github.com/parleychat/parley/internal/blob/s3"
)

// accepted names the forms Open understands, for its errors.
const accepted = `"" or "file://" (<data-dir>/blobs), "file:///absolute/path", "s3://bucket[/prefix][?` + s3Params + `]"`

// s3Params names the query parameters of an s3:// URL, for its errors.
const s3Params = "endpoint=URL&region=NAME&path_style=BOOL&credentials_file=PATH"

// Open returns the store rawURL names:
//
//   - "" or "file://": files under <dataDir>/blobs, the default;
//   - "file:///abs/path": files under /abs/path;
//   - "s3://bucket[/prefix][?query]": objects in an S3-compatible bucket, as ParseS3 reads it.
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
		opts, err := parseS3(u)
		if err != nil {
			return nil, fmt.Errorf("blob store URL %q: %w", rawURL, err)
		}
		return s3.Open(opts)
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

// ParseS3 returns the options an s3:// URL gives:
//
//	s3://bucket[/prefix][?endpoint=http://127.0.0.1:8333&region=us-east-1&path_style=true&credentials_file=/path]
//
// The prefix, when there is one, is a path of non-empty elements; the store names the
// object of key "prefix/key". endpoint is an S3-compatible server's base URL (empty for
// Amazon S3), region the bucket's, path_style a boolean (true for most S3-compatible
// servers) and credentials_file a shared credentials file read instead of the usual AWS
// sources. Any other parameter is refused, and so are credentials in the URL itself.
func ParseS3(rawURL string) (s3.Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return s3.Options{}, err
	}
	if u.Scheme != "s3" {
		return s3.Options{}, fmt.Errorf("%q is not an s3:// URL", rawURL)
	}
	return parseS3(u)
}

func parseS3(u *url.URL) (s3.Options, error) {
	var opts s3.Options
	if u.Opaque != "" || u.Host == "" {
		return opts, errors.New("want s3://bucket[/prefix], with the bucket")
	}
	if u.User != nil {
		return opts, errors.New("credentials do not go in the URL: use credentials_file or the AWS variables")
	}
	if u.Port() != "" || strings.ContainsAny(u.Host, ":[]") {
		return opts, fmt.Errorf("bucket %q: the server goes in endpoint=, not in the bucket", u.Host)
	}
	if u.Fragment != "" {
		return opts, errors.New("the URL has a fragment (#...)")
	}
	opts.Bucket = u.Host
	if p := strings.Trim(u.Path, "/"); p != "" {
		for elem := range strings.SplitSeq(p, "/") {
			if elem == "" || elem == "." || elem == ".." {
				return opts, fmt.Errorf("prefix %q: want elements that are not empty, \".\" or \"..\"", p)
			}
		}
		opts.Prefix = p + "/"
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return opts, fmt.Errorf("query: %w", err)
	}
	for name, values := range query {
		if len(values) != 1 {
			return opts, fmt.Errorf("query parameter %s given %d times", name, len(values))
		}
		v := values[0]
		switch name {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return opts, fmt.Errorf("endpoint %q: want http://host[:port] or https://host[:port]", v)
			}
			opts.Endpoint = v
		case "region":
			opts.Region = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return opts, fmt.Errorf("path_style %q: want true or false", v)
			}
			opts.PathStyle = b
		case "credentials_file":
			if !filepath.IsAbs(v) {
				return opts, fmt.Errorf("credentials_file %q: want an absolute path", v)
			}
			opts.CredentialsFile = v
		default:
			return opts, fmt.Errorf("unknown query parameter %q: want %s", name, s3Params)
		}
	}
	return opts, nil
}
