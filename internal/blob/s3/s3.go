// Package s3 is a blob.Store on S3-compatible object storage (Amazon S3, SeaweedFS, MinIO
// and the like): one object per blob, under Options.Prefix+key in one bucket.
//
// S3 makes an object visible only once it is whole, so a reader sees the old blob or the new
// one. Put streams: a blob up to PartSize goes up in one PutObject, a larger one as a
// multipart upload of PartSize parts, two in flight, so that a Put holds at most two parts
// in memory whatever the blob's size; a failed multipart upload is aborted, leaving nothing
// visible. An Object reads through one ranged GET from its offset to the end, reopened only
// after a Seek elsewhere, and pins the ETag it was opened at (If-Match), so that a blob
// replaced while it is read is an error rather than a mix of two.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/parleychat/parley/internal/blob"
)

// PartSize is the size of one part of a multipart upload, and the largest blob that Put
// sends in one PutObject.
const PartSize = 8 << 20

// inFlight is how many parts of one Put are uploaded at once (and so held in memory).
const inFlight = 2

// maxParts is S3's limit on the parts of one upload, which bounds a blob to
// maxParts*PartSize (about 78 GiB).
const maxParts = 10000

// MaxSize is the largest blob Put accepts.
const MaxSize = maxParts * PartSize

// Options configure a Store.
type Options struct {
	// Bucket holds the blobs; it must exist. Required.
	Bucket string
	// Prefix is put before every key to name its object, for example "parley/" to share a
	// bucket. Empty, or ending in "/" as a rule.
	Prefix string
	// Endpoint is the server's base URL ("http://127.0.0.1:8333") for S3-compatible
	// servers; empty for Amazon S3.
	Endpoint string
	// Region is the bucket's region; empty takes the AWS configuration's (AWS_REGION, the
	// profile), and "us-east-1" when that names none.
	Region string
	// PathStyle addresses the bucket in the URL's path (http://host/bucket/key) rather than
	// its host name (http://bucket.host/key), as most S3-compatible servers want.
	PathStyle bool
	// CredentialsFile is a shared credentials file ("[default]\naws_access_key_id = ...")
	// read instead of ~/.aws/credentials. Empty takes the usual AWS sources: the
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY variables, AWS_PROFILE, the shared files,
	// and (for Amazon S3 only, with no Endpoint) the EC2 instance role.
	CredentialsFile string
}

// Store keeps blobs as objects in an S3 bucket. It is safe for concurrent use.
type Store struct {
	client *s3.Client
	bucket string
	prefix string
	closed atomic.Bool
}

var _ blob.Store = (*Store)(nil)

// Open returns the store opts describe. It reads the AWS configuration but sends no request:
// a wrong bucket or credentials show in the first call.
func Open(opts Options) (*Store, error) {
	if opts.Bucket == "" {
		return nil, errors.New("s3: the bucket is required")
	}
	loads := []func(*config.LoadOptions) error{}
	if opts.Region != "" {
		loads = append(loads, config.WithRegion(opts.Region))
	}
	if opts.CredentialsFile != "" {
		if _, err := os.Stat(opts.CredentialsFile); err != nil {
			return nil, fmt.Errorf("s3: credentials file: %w", err)
		}
		loads = append(loads, config.WithSharedCredentialsFiles([]string{opts.CredentialsFile}))
	}
	if opts.Endpoint != "" {
		// An S3-compatible server takes no EC2 instance role: without credentials, fail
		// rather than ask the instance metadata service for some.
		loads = append(loads, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	// The default transport keeps 2 idle connections per host, too few for a store that
	// many goroutines share: every other request would open a connection.
	// (A BuildableClient, so that the configuration may add AWS_CA_BUNDLE to it.)
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 64
		tr.ResponseHeaderTimeout = time.Minute
	})
	loads = append(loads, config.WithHTTPClient(httpClient))
	cfg, err := config.LoadDefaultConfig(context.Background(), loads...)
	if err != nil {
		return nil, fmt.Errorf("s3: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cfg.Logger = warnings{}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle
	})
	return &Store{client: client, bucket: opts.Bucket, prefix: opts.Prefix}, nil
}

// warnings logs the SDK's warnings and drops its debug lines, such as the one it writes for
// every GET of a multipart object ("Response has no supported checksum").
type warnings struct{}

func (warnings) Logf(c logging.Classification, format string, v ...any) {
	if c == logging.Warn {
		log.Printf("s3: "+format, v...)
	}
}

// CreateBucket creates the store's bucket unless it exists, for setting up a server or a
// test; the store itself never creates one.
func (s *Store) CreateBucket(ctx context.Context) error {
	if s.closed.Load() {
		return blob.ErrClosed
	}
	_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err == nil || errors.As(err, &owned) {
		return nil
	}
	return s.fail(ctx, "create bucket", "", err)
}

// object returns the object name of key, or why the call must fail.
func (s *Store) object(ctx context.Context, key string) (*string, error) {
	if s.closed.Load() {
		return nil, blob.ErrClosed
	}
	if err := blob.CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return aws.String(s.prefix + key), nil
}

// fail returns err, from op on key, wrapping the blob error it means: ctx's error once ctx
// is done, ErrNotFound for a missing object, ErrUnavailable for anything else (an
// unreachable server, a 5xx, a refusal).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("s3: %s %q: %w (%w)", op, key, ctxErr, err)
	}
	if isNotFound(err) {
		return fmt.Errorf("s3: %s %q: %w (%w)", op, key, blob.ErrNotFound, err)
	}
	return fmt.Errorf("s3: %s %q in bucket %s: %w: %w", op, key, s.bucket, blob.ErrUnavailable, err)
}

// isNotFound reports whether err says the object is missing.
func isNotFound(err error) bool {
	var noKey *types.NoSuchKey
	var notFound *types.NotFound
	if errors.As(err, &noKey) || errors.As(err, &notFound) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound") {
		return true
	}
	return httpStatus(err) == http.StatusNotFound
}

// httpStatus returns the status of the response err came with, or 0.
func httpStatus(err error) int {
	var resp *awshttp.ResponseError
	if errors.As(err, &resp) {
		return resp.HTTPStatusCode()
	}
	return 0
}

// Put stores size bytes from r under key, replacing any blob there. The bytes go up in
// PartSize pieces; a reader of another length, a failed request or a done ctx leaves
// nothing of the blob visible.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	name, err := s.object(ctx, key)
	if err != nil {
		return err
	}
	if size < 0 || size > MaxSize {
		return fmt.Errorf("s3: put %q: size %d, want 0 to %d", key, size, int64(MaxSize))
	}
	if size <= PartSize {
		buf := make([]byte, size)
		if err := s.fill(ctx, key, r, buf, true); err != nil {
			return err
		}
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: name,
			Body: bytes.NewReader(buf), ContentLength: aws.Int64(size),
		})
		if err != nil {
			return s.fail(ctx, "put", key, err)
		}
		return nil
	}
	return s.putMultipart(ctx, key, name, r, size)
}

// fill reads exactly len(buf) bytes from r into buf, checking ctx between reads; when last,
// it also checks that r has no more.
func (s *Store) fill(ctx context.Context, key string, r io.Reader, buf []byte, last bool) error {
	for n := 0; n < len(buf); {
		m, err := r.Read(buf[n:min(len(buf), n+256<<10)])
		n += m
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("s3: put %q: %w", key, ctxErr)
		}
		if err == io.EOF && n < len(buf) {
			return fmt.Errorf("s3: put %q: the reader ended before the size given: %w", key, io.ErrUnexpectedEOF)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("s3: put %q: reading: %w", key, err)
		}
	}
	if !last {
		return nil
	}
	var one [1]byte
	for {
		m, err := r.Read(one[:])
		if m > 0 {
			return fmt.Errorf("s3: put %q: the reader holds more than the size given", key)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("s3: put %q: %w", key, ctxErr)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("s3: put %q: reading: %w", key, err)
		}
	}
}

// putMultipart stores a blob larger than PartSize as a multipart upload of PartSize parts:
// it reads the next part while one goes up, or lets two go up at once, so that it holds at
// most inFlight parts; it aborts the upload unless it completes.
func (s *Store) putMultipart(ctx context.Context, key string, name *string, r io.Reader, size int64) (err error) {
	parts := int((size + PartSize - 1) / PartSize)
	// Read the first part before starting the upload, so that a reader that fails at once
	// costs no request.
	first := make([]byte, PartSize)
	if err := s.fill(ctx, key, r, first, false); err != nil {
		return err
	}
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: name,
	})
	if err != nil {
		return s.fail(ctx, "put", key, err)
	}
	uploadID := created.UploadId
	upCtx, cancel := context.WithCancel(ctx)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		completed = make([]types.CompletedPart, parts)
		upErr     error // the first part's failure
	)
	defer func() {
		cancel()
		wg.Wait()
		if err == nil {
			return
		}
		// The parts are invisible, but they take space until the upload is aborted, which
		// must happen even when ctx is done.
		abortCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer stop()
		_, _ = s.client.AbortMultipartUpload(abortCtx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: name, UploadId: uploadID,
		})
	}()
	// failed returns why the upload must stop, or nil.
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		if upErr != nil {
			return s.fail(ctx, "put", key, upErr)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("s3: put %q: %w", key, ctxErr)
		}
		return nil
	}
	// free holds a token per part that may be in memory: a buffer to reuse, or nil.
	free := make(chan []byte, inFlight)
	free <- nil
	upload := func(i int, buf []byte) {
		defer wg.Done()
		num := aws.Int32(int32(i + 1))
		out, err := s.client.UploadPart(upCtx, &s3.UploadPartInput{
			Bucket: aws.String(s.bucket), Key: name, UploadId: uploadID, PartNumber: num,
			Body: bytes.NewReader(buf), ContentLength: aws.Int64(int64(len(buf))),
		})
		mu.Lock()
		if err != nil && upErr == nil {
			upErr = err
			cancel()
		}
		if err == nil {
			completed[i] = types.CompletedPart{
				PartNumber: num, ETag: out.ETag,
				ChecksumCRC32: out.ChecksumCRC32, ChecksumCRC32C: out.ChecksumCRC32C,
				ChecksumCRC64NVME: out.ChecksumCRC64NVME,
				ChecksumSHA1:      out.ChecksumSHA1, ChecksumSHA256: out.ChecksumSHA256,
			}
		}
		mu.Unlock()
		free <- buf[:cap(buf)]
	}
	wg.Add(1)
	go upload(0, first)
	for i := 1; i < parts; i++ {
		var buf []byte
		select {
		case buf = <-free:
		case <-upCtx.Done():
			return failed()
		}
		if buf == nil {
			buf = make([]byte, PartSize)
		}
		buf = buf[:min(PartSize, size-int64(i)*PartSize)]
		if err := s.fill(upCtx, key, r, buf, i == parts-1); err != nil {
			if e := failed(); e != nil {
				return e
			}
			return err
		}
		wg.Add(1)
		go upload(i, buf)
	}
	wg.Wait()
	if err := failed(); err != nil {
		return err
	}
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: name, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	})
	if err != nil {
		return s.fail(ctx, "put", key, err)
	}
	return nil
}

// PutFile stores the file at path under key, as Put does.
func (s *Store) PutFile(ctx context.Context, key, path string) error {
	if _, err := s.object(ctx, key); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("s3: put %q from %s: %w", key, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("s3: put %q from %s: %w", key, path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("s3: put %q from %s: not a regular file", key, path)
	}
	return s.Put(ctx, key, f, fi.Size())
}

// Open returns the blob under key. It starts the GET that reads the blob from its start, so
// that the Object sees one version of the blob from the first byte: a sequential reader never
// fails because a Put replaced the blob between two requests of Open's.
func (s *Store) Open(ctx context.Context, key string) (blob.Object, error) {
	name, err := s.object(ctx, key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: name})
	if err != nil {
		return nil, s.fail(ctx, "open", key, err)
	}
	o := &object{s: s, ctx: ctx, key: key, name: name, body: out.Body}
	if out.ContentLength != nil {
		o.size = *out.ContentLength
	}
	if out.LastModified != nil {
		o.modTime = *out.LastModified
	}
	if out.ETag != nil {
		o.etag = *out.ETag
	}
	return o, nil
}

// object is an open blob. Its reads go through body, a GET from bodyPos to the end.
type object struct {
	s       *Store
	ctx     context.Context
	key     string
	name    *string
	size    int64
	modTime time.Time
	etag    string
	pos     int64
	body    io.ReadCloser // nil once closed for a Seek or at the end
	bodyPos int64
	closed  bool
}

func (o *object) Size() int64        { return o.size }
func (o *object) ModTime() time.Time { return o.modTime }

// skipMax is the longest forward Seek that reads through the open GET rather than opening
// another.
const skipMax = 64 << 10

// Read reads from the current offset, through the open GET when it is there and opening one
// from the offset to the end when not.
func (o *object) Read(p []byte) (int, error) {
	if o.closed {
		return 0, errors.New("s3: read of a closed object")
	}
	if o.pos >= o.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if o.body != nil && o.bodyPos != o.pos {
		if d := o.pos - o.bodyPos; d > 0 && d <= skipMax {
			if _, err := io.CopyN(io.Discard, o.body, d); err != nil {
				o.dropBody()
			} else {
				o.bodyPos = o.pos
			}
		} else {
			o.dropBody()
		}
	}
	if o.body == nil {
		if err := o.reopen(); err != nil {
			return 0, err
		}
	}
	n, err := o.body.Read(p[:min(int64(len(p)), o.size-o.pos)])
	o.pos += int64(n)
	o.bodyPos = o.pos
	if err == io.EOF {
		o.dropBody()
		if o.pos < o.size {
			return n, fmt.Errorf("s3: read %q: the object ended at %d of %d bytes: %w", o.key, o.pos, o.size, blob.ErrUnavailable)
		}
		return n, nil
	}
	if err != nil {
		o.dropBody()
		return n, o.s.fail(o.ctx, "read", o.key, err)
	}
	return n, nil
}

// reopen opens a GET from o.pos to the end of the version of the blob that o was opened at.
func (o *object) reopen() error {
	if o.s.closed.Load() {
		return blob.ErrClosed
	}
	in := &s3.GetObjectInput{
		Bucket: aws.String(o.s.bucket), Key: o.name,
		Range: aws.String("bytes=" + strconv.FormatInt(o.pos, 10) + "-"),
	}
	if o.etag != "" {
		in.IfMatch = aws.String(o.etag)
	}
	out, err := o.s.client.GetObject(o.ctx, in)
	if err != nil {
		if httpStatus(err) == http.StatusPreconditionFailed {
			return fmt.Errorf("s3: read %q: the blob was replaced while being read: %w", o.key, blob.ErrUnavailable)
		}
		return o.s.fail(o.ctx, "read", o.key, err)
	}
	if out.ContentLength != nil && *out.ContentLength != o.size-o.pos {
		_ = out.Body.Close()
		return fmt.Errorf("s3: read %q: a GET from %d answered %d bytes, not %d: %w",
			o.key, o.pos, *out.ContentLength, o.size-o.pos, blob.ErrUnavailable)
	}
	o.body, o.bodyPos = out.Body, o.pos
	return nil
}

// dropBody closes the open GET.
func (o *object) dropBody() {
	if o.body != nil {
		_ = o.body.Close()
		o.body = nil
	}
}

// Seek moves the offset; the next Read opens a GET there unless the open one is at it or
// a little before it.
func (o *object) Seek(offset int64, whence int) (int64, error) {
	if o.closed {
		return 0, errors.New("s3: seek on a closed object")
	}
	var pos int64
	switch whence {
	case io.SeekStart:
		pos = offset
	case io.SeekCurrent:
		pos = o.pos + offset
	case io.SeekEnd:
		pos = o.size + offset
	default:
		return 0, fmt.Errorf("s3: seek: whence %d", whence)
	}
	if pos < 0 {
		return 0, fmt.Errorf("s3: seek to %d, before the start", pos)
	}
	o.pos = pos
	return pos, nil
}

// Close closes the open GET.
func (o *object) Close() error {
	o.dropBody()
	o.closed = true
	return nil
}

// Delete removes the blob under key; S3 answers a missing one as a deleted one.
func (s *Store) Delete(ctx context.Context, key string) error {
	name, err := s.object(ctx, key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: name})
	if err != nil && !isNotFound(err) {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// Close makes every later call fail with ErrClosed. (Idle connections close after their
// timeout.)
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
