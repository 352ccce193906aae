package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/blobopen"
	"github.com/parleychat/parley/internal/blob/blobtest"
	"github.com/parleychat/parley/internal/blob/s3"
)

// envURL names the S3 server the tests use.
const envURL = "PARLEY_TEST_S3_URL"

// testURL returns $PARLEY_TEST_S3_URL, or skips the test.
func testURL(tb testing.TB) string {
	tb.Helper()
	raw := os.Getenv(envURL)
	if raw == "" {
		tb.Skip(envURL + " is unset, so the S3 store is not tested: set it to an s3:// URL of a bucket that" +
			" exists, such as s3://parley-test?endpoint=http://127.0.0.1:8333&region=us-east-1&path_style=true&credentials_file=/path" +
			" (.ci/seaweedfs starts a SeaweedFS server and prints one; .ci/run sets it)")
	}
	return raw
}

// mustOpen opens a store under a prefix of its own in the bucket $PARLEY_TEST_S3_URL names,
// and empties and closes it when the test ends; without the variable, it skips the test.
func mustOpen(tb testing.TB) *s3.Store {
	tb.Helper()
	raw := testURL(tb)
	opts, err := blobopen.ParseS3(raw)
	if err != nil {
		tb.Fatalf("%s: %v", envURL, err)
	}
	opts.Prefix += fmt.Sprintf("test-%s-%s/", time.Now().UTC().Format("20060102t150405"), strings.ToLower(rand.Text()[:10]))
	s, err := s3.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A closed store refuses calls: empty the prefix through a store of its own.
		t, err := s3.Open(opts)
		if err == nil {
			err = t.DeleteAll(ctx)
		}
		if err != nil {
			tb.Logf("emptying %s: %v", opts.Prefix, err)
		}
		_ = s.Close()
	})
	return s
}

func TestConformance(t *testing.T) {
	testURL(t)
	blobtest.Run(t, func(t testing.TB) blob.Store { return mustOpen(t) })
}

// shortReader yields n zero bytes, then ends.
func shortReader(n int64) io.Reader { return io.LimitReader(zeros{}, n) }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestFailedMultipartPutAborts(t *testing.T) {
	s := mustOpen(t)
	ctx := t.Context()
	const size = 2*s3.PartSize + 5
	for _, tt := range []struct {
		name string
		r    io.Reader
	}{
		{"short in the last part", shortReader(size - 1)},
		{"short in the second part", shortReader(s3.PartSize + 1)},
		{"long", shortReader(size + 1)},
	} {
		if err := s.Put(ctx, "a/x", tt.r, size); err == nil {
			t.Errorf("%s: Put succeeded", tt.name)
		}
		if _, err := s.Open(ctx, "a/x"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%s: Open after the failed Put = %v, want ErrNotFound", tt.name, err)
		}
		uploads, err := s.Uploads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(uploads) > 0 {
			t.Errorf("%s: multipart uploads left behind: %q", tt.name, uploads)
		}
	}
}

func TestReplacedMidRead(t *testing.T) {
	s := mustOpen(t)
	ctx := t.Context()
	old := bytes.Repeat([]byte("o"), 1<<20)
	if err := s.Put(ctx, "a/x", bytes.NewReader(old), int64(len(old))); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Open(ctx, "a/x")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if _, err := io.ReadFull(obj, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/x", shortReader(1<<20), 1<<20); err != nil {
		t.Fatal(err)
	}
	// The open GET may go on with the old bytes; one opened after a Seek must not give the
	// new ones.
	if _, err := obj.Seek(512<<10, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(obj)
	if err == nil {
		t.Fatalf("reading on after the blob was replaced succeeded, with %d bytes", len(b))
	}
	if !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("reading on after the blob was replaced = %v, want ErrUnavailable", err)
	}
	if bytes.ContainsRune(b, 0) {
		t.Error("the reader saw bytes of the new blob")
	}
}

func TestUnreachable(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	s, err := s3.Open(s3.Options{Bucket: "b", Endpoint: "http://127.0.0.1:1", PathStyle: true, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Open(ctx, "a/x"); !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Open on an unreachable server = %v, want ErrUnavailable", err)
	}
	if err := s.Put(ctx, "a/x", bytes.NewReader([]byte("x")), 1); !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Put on an unreachable server = %v, want ErrUnavailable", err)
	}
	if err := s.Delete(ctx, "a/x"); !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Delete on an unreachable server = %v, want ErrUnavailable", err)
	}
}

const benchSize = 100 << 20

func BenchmarkPut100MiB(b *testing.B) {
	blobtest.BenchmarkPut(b, mustOpen(b), benchSize)
}

func BenchmarkOpenRead100MiB(b *testing.B) {
	blobtest.BenchmarkOpenRead(b, mustOpen(b), benchSize)
}
