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
		{"s3://bucket/prefix", dataDir, "s3 blob store not built yet"},
		{"s3://", dataDir, "s3 blob store not built yet"},
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
