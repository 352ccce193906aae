package blobopen_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/blob/blobopen"
	"github.com/parleychat/parley/internal/blob/disk"
	"github.com/parleychat/parley/internal/blob/s3"
)

func TestOpenDisk(t *testing.T) {
	dataDir, other := t.TempDir(), t.TempDir()
	for i, tt := range []struct{ url, root string }{
		{"", filepath.Join(dataDir, "blobs")},
		{"file://", filepath.Join(dataDir, "blobs")},
		{"file://" + filepath.ToSlash(other), other},
		{"file://" + filepath.ToSlash(other) + "/deeper/still", filepath.Join(other, "deeper", "still")},
	} {
		key := "a/k" + strconv.Itoa(i)
		t.Run(tt.url, func(t *testing.T) {
			s, err := blobopen.Open(tt.url, dataDir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, ok := s.(*disk.Store); !ok {
				t.Fatalf("Open returned a %T, want a *disk.Store", s)
			}
			if err := s.Put(t.Context(), key, bytes.NewReader([]byte("x")), 1); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(tt.root, filepath.FromSlash(key))); err != nil {
				t.Errorf("the blob is not under %s: %v", tt.root, err)
			}
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	dataDir := t.TempDir()
	for _, tt := range []struct{ url, dataDir, want string }{
		{"s3://", dataDir, "with the bucket"},
		{"s3:bucket", dataDir, "with the bucket"},
		{"s3://bucket?endpont=http://x", dataDir, `unknown query parameter "endpont"`},
		{"s3://bucket?credentials_file=/nonexistent/creds", dataDir, "credentials file"},
		{"file://relative/path", dataDir, "file:///absolute/path"},
		{"file:relative", dataDir, "file:///absolute/path"},
		{"file:///abs?x=1", dataDir, "file:///absolute/path"},
		{"gs://bucket", dataDir, `"file://"`},
		{"/abs/path", dataDir, `"file://"`},
		{"%zz", dataDir, "file:///absolute/path"},
		{"", "", "data directory is required"},
		{"file://", "", "data directory is required"},
	} {
		s, err := blobopen.Open(tt.url, tt.dataDir)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%q, %q) succeeded", tt.url, tt.dataDir)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%q, %q) = %q, want it to say %q", tt.url, tt.dataDir, err, tt.want)
		}
	}
}

func TestOpenS3(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = k\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Open sends no request, so no server is needed.
	s, err := blobopen.Open("s3://bucket/p?endpoint=http://127.0.0.1:1&path_style=true&credentials_file="+creds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*s3.Store); !ok {
		t.Fatalf("Open returned a %T, want an *s3.Store", s)
	}
}

func TestParseS3(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want s3.Options
	}{
		{"s3://bucket", s3.Options{Bucket: "bucket"}},
		{"s3://bucket/", s3.Options{Bucket: "bucket"}},
		{"s3://my-bucket.example/parley", s3.Options{Bucket: "my-bucket.example", Prefix: "parley/"}},
		{"s3://bucket/a/b/", s3.Options{Bucket: "bucket", Prefix: "a/b/"}},
		{
			"s3://parley-test/ci?endpoint=http://127.0.0.1:8333&region=us-east-1&path_style=true&credentials_file=/etc/parley/s3",
			s3.Options{
				Bucket: "parley-test", Prefix: "ci/", Endpoint: "http://127.0.0.1:8333", Region: "us-east-1",
				PathStyle: true, CredentialsFile: "/etc/parley/s3",
			},
		},
		{"s3://bucket?path_style=false&region=eu-west-3", s3.Options{Bucket: "bucket", Region: "eu-west-3"}},
		{"s3://bucket?endpoint=https%3A%2F%2Fs3.example%3A9000%2F", s3.Options{Bucket: "bucket", Endpoint: "https://s3.example:9000/"}},
	} {
		got, err := blobopen.ParseS3(tt.url)
		if err != nil {
			t.Errorf("ParseS3(%q): %v", tt.url, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseS3(%q) = %+v, want %+v", tt.url, got, tt.want)
		}
	}
}

func TestParseS3Refuses(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"file:///x", "not an s3:// URL"},
		{"s3://", "with the bucket"},
		{"s3:///prefix", "with the bucket"},
		{"s3://key:secret@bucket", "credentials do not go in the URL"},
		{"s3://bucket:9000/p", "endpoint="},
		{"s3://bucket/p#frag", "fragment"},
		{"s3://bucket/a//b", "prefix"},
		{"s3://bucket/a/../b", "prefix"},
		{"s3://bucket?bucket=x", `unknown query parameter "bucket"`},
		{"s3://bucket?region=a&region=b", "given 2 times"},
		{"s3://bucket?endpoint=127.0.0.1:8333", "endpoint"},
		{"s3://bucket?endpoint=ftp://host", "endpoint"},
		{"s3://bucket?path_style=yes", "path_style"},
		{"s3://bucket?credentials_file=relative", "absolute path"},
		{"s3://bucket?a=%zz", "query"},
	} {
		opts, err := blobopen.ParseS3(tt.url)
		if err == nil {
			t.Errorf("ParseS3(%q) = %+v, want an error", tt.url, opts)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseS3(%q) = %q, want it to say %q", tt.url, err, tt.want)
		}
	}
}
