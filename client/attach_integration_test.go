package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// attachServer starts a node with no request rate limits, so that chunked uploads are not
// slowed down by them.
func attachServer(t *testing.T, configure ...func(*server.Config)) *parleytest.Server {
	t.Helper()
	return parleytest.Start(t, append([]func(*server.Config){func(c *server.Config) {
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.ConvCreateEvery = 0
	}}, configure...)...)
}

func randomData(n int, seed byte) []byte {
	r := rand.NewChaCha8([32]byte{seed})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// testPNG returns a w×h PNG of two coloured halves.
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.NRGBA{200, 40, 40, 255}), image.Point{}, draw.Src)
	draw.Draw(img, image.Rect(0, h/2, w, h), image.NewUniform(color.NRGBA{40, 40, 200, 255}), image.Point{}, draw.Src)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newTestClient(s *parleytest.Server, token string, hc *http.Client) *client.Client {
	return client.New(client.Options{
		BaseURL: s.URL, Token: token, HTTPClient: hc,
		Backoff: client.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestUploadAndDownload: a file of a few MiB goes up in chunks, with progress up to its
// size, and comes back byte for byte, whole and from an offset.
func TestUploadAndDownload(t *testing.T) {
	s := attachServer(t)
	ctx := testCtx(t)
	alice := newTestClient(s, s.User(t, "alice"), nil)
	data := randomData(3<<20+17, 1)

	var mu sync.Mutex
	var sent []int64
	var created string
	a, err := alice.Upload(ctx, bytes.NewReader(data), int64(len(data)), client.UploadOptions{
		ChunkSize: 1 << 20,
		OnCreated: func(id string) { created = id },
		OnProgress: func(n, total int64) {
			mu.Lock()
			defer mu.Unlock()
			if total != int64(len(data)) {
				t.Errorf("progress total %d, want %d", total, len(data))
			}
			sent = append(sent, n)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if a.ID != created || !a.Complete || a.Size != int64(len(data)) || a.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("uploaded %+v (created %q), want complete, %d bytes, sha256 %x", a, created, len(data), sum)
	}
	mu.Lock()
	for i := 1; i < len(sent); i++ {
		if sent[i] < sent[i-1] {
			t.Errorf("progress went back without a failure: %v", sent)
			break
		}
	}
	if len(sent) == 0 || sent[len(sent)-1] != int64(len(data)) {
		t.Errorf("progress does not end at the size: %v", sent)
	}
	mu.Unlock()
	if off, err := alice.UploadOffset(ctx, a.ID); err != nil || off != a.Size {
		t.Errorf("UploadOffset of a complete upload = %d, %v; want %d", off, err, a.Size)
	}

	var buf bytes.Buffer
	got, err := alice.Download(ctx, a.ID, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != a.SHA256 || sha256.Sum256(buf.Bytes()) != sum {
		t.Fatalf("downloaded %d bytes that differ from the upload", buf.Len())
	}

	// A download resumed from an offset gets the rest alone.
	const from = 1<<20 + 5
	body, err := alice.OpenAttachmentRange(ctx, a.ID, from)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if body.Offset != from || body.Size != a.Size || body.Length != a.Size-from || body.ETag == "" || !bytes.Equal(rest, data[from:]) {
		t.Fatalf("range from %d: offset %d size %d length %d etag %q, %d bytes (equal: %v)",
			from, body.Offset, body.Size, body.Length, body.ETag, len(rest), bytes.Equal(rest, data[from:]))
	}
	if _, err := alice.OpenAttachmentRange(ctx, a.ID, a.Size); client.ErrorCode(err) != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("range from the end: %v, want 416", err)
	}

	// Signed URLs need no token.
	urls, err := alice.AttachmentURLs(ctx, a.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if urls.ExpiresAt <= time.Now().UnixMilli() || urls.Thumbnail != "" {
		t.Errorf("URLs %+v: want a future expiry and no thumbnail (random bytes)", urls)
	}
	resp, err := http.Get(s.URL + urls.Content)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(signed, data) {
		t.Fatalf("GET signed URL: %d, %d bytes, %v", resp.StatusCode, len(signed), err)
	}
}

// cutTransport cuts the body of the first PATCH it carries halfway, as a dropped
// connection does.
type cutTransport struct {
	patches atomic.Int32
	cut     atomic.Bool
}

func (c *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		c.patches.Add(1)
		if c.cut.CompareAndSwap(false, true) {
			req = req.Clone(req.Context())
			req.Body = &cutBody{rc: req.Body, left: req.ContentLength / 2}
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

type cutBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection dropped")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// TestUploadResumesAfterCutPatch: the first PATCH fails midway; Upload asks the server for
// its offset and sends the rest, and the file arrives whole.
func TestUploadResumesAfterCutPatch(t *testing.T) {
	s := attachServer(t)
	ctx := testCtx(t)
	tr := &cutTransport{}
	alice := newTestClient(s, s.User(t, "alice"), &http.Client{Transport: tr})
	data := randomData(3<<20+1, 2)
	a, err := alice.Upload(ctx, bytes.NewReader(data), int64(len(data)), client.UploadOptions{ChunkSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.cut.Load() || tr.patches.Load() < 3 {
		t.Fatalf("%d PATCHes (cut: %v): want the cut one and at least two more", tr.patches.Load(), tr.cut.Load())
	}
	var buf bytes.Buffer
	if _, err := alice.Download(ctx, a.ID, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Fatal("the resumed upload does not download as the file")
	}
}

// TestResumeUploadAfterRestart: an app stops mid-upload (its context ends) and, later,
// continues it from the saved id; a stranger cannot see or resume it.
func TestResumeUploadAfterRestart(t *testing.T) {
	s := attachServer(t)
	ctx := testCtx(t)
	alice := newTestClient(s, s.User(t, "alice"), nil)
	bob := newTestClient(s, s.User(t, "bob"), nil)
	data := randomData(2<<20+3, 3)

	stop, cancel := context.WithCancel(ctx)
	var id string
	_, err := alice.Upload(stop, bytes.NewReader(data), int64(len(data)), client.UploadOptions{
		ChunkSize: 1 << 20,
		OnCreated: func(got string) { id = got },
		OnProgress: func(sent, _ int64) {
			if sent >= 1<<20 {
				cancel()
			}
		},
	})
	cancel()
	if !errors.Is(err, context.Canceled) || id == "" {
		t.Fatalf("Upload stopped midway: %v (id %q), want context.Canceled and an id", err, id)
	}
	if off, err := alice.UploadOffset(ctx, id); err != nil || off >= int64(len(data)) {
		t.Fatalf("offset of the stopped upload: %d, %v", off, err)
	}
	if _, err := alice.OpenAttachment(ctx, id, false); client.ErrorCode(err) != http.StatusNotFound {
		t.Errorf("download of an unfinished upload: %v, want 404", err)
	}
	if _, err := bob.ResumeUpload(ctx, id, bytes.NewReader(data), int64(len(data)), client.UploadOptions{}); client.ErrorCode(err) != http.StatusNotFound {
		t.Errorf("a stranger's ResumeUpload: %v, want 404", err)
	}

	a, err := alice.ResumeUpload(ctx, id, bytes.NewReader(data), int64(len(data)), client.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if a.ID != id || !a.Complete || a.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("resumed upload: %+v", a)
	}
	// Resuming a complete upload is a no-op.
	if _, err := alice.ResumeUpload(ctx, id, bytes.NewReader(data), int64(len(data)), client.UploadOptions{}); err != nil {
		t.Errorf("ResumeUpload of a complete upload: %v", err)
	}

	if _, err := bob.Attachment(ctx, id); client.ErrorCode(err) != http.StatusNotFound {
		t.Errorf("a stranger's Attachment: %v, want 404", err)
	}
	if _, err := bob.OpenAttachment(ctx, id, false); client.ErrorCode(err) != http.StatusNotFound {
		t.Errorf("a stranger's OpenAttachment: %v, want 404", err)
	}
	if _, err := bob.AttachmentURLs(ctx, id, 0); client.ErrorCode(err) != http.StatusNotFound {
		t.Errorf("a stranger's AttachmentURLs: %v, want 404", err)
	}
}

// TestSendImageAttachment: a PNG gets its dimensions and a JPEG thumbnail; sent as an image
// message, it reaches the peer with content.attachment filled in, and the peer may then
// download it.
func TestSendImageAttachment(t *testing.T) {
	s := attachServer(t)
	ctx := testCtx(t)
	alice := newTestClient(s, s.User(t, "alice"), nil)
	bob := newTestClient(s, s.User(t, "bob"), nil)
	img := testPNG(t, 640, 480)
	a, err := alice.Upload(ctx, bytes.NewReader(img), int64(len(img)), client.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.MimeType != "image/png" || a.Width != 640 || a.Height != 480 || !a.Thumbnail || a.Preview == "" {
		t.Fatalf("PNG attachment: %+v", a)
	}
	thumb, err := alice.OpenAttachment(ctx, a.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := jpeg.DecodeConfig(thumb)
	thumb.Close()
	if err != nil || thumb.ContentType != "image/jpeg" || cfg.Width > 640 || cfg.Width == 0 {
		t.Fatalf("thumbnail: %s %dx%d, %v", thumb.ContentType, cfg.Width, cfg.Height, err)
	}
	urls, err := alice.AttachmentURLs(ctx, a.ID, 0)
	if err != nil || urls.Thumbnail == "" {
		t.Fatalf("URLs of an image: %+v, %v; want a thumbnail URL", urls, err)
	}

	conv, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SendAttachment(ctx, conv.ConvID, client.ContentText, a.ID, "", ""); client.ErrorCode(err) != http.StatusBadRequest {
		t.Errorf("SendAttachment as text: %v, want 400", err)
	}
	ack, err := alice.SendAttachment(ctx, conv.ConvID, client.ContentImage, a.ID, "cat.png", "look")
	if err != nil {
		t.Fatal(err)
	}
	page, err := bob.History(ctx, conv.ConvID, client.HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].Seq != ack.Seq {
		t.Fatalf("bob's history: %+v", page.Messages)
	}
	c := page.Messages[0].Attachment()
	if c == nil || c.AttachmentID != a.ID || c.Name != "cat.png" || c.Caption != "look" ||
		c.Attachment == nil || c.Attachment.SHA256 != a.SHA256 || c.Attachment.Width != 640 {
		t.Fatalf("content of the image message: %+v", c)
	}
	var buf bytes.Buffer
	if _, err := bob.Download(ctx, a.ID, &buf); err != nil || !bytes.Equal(buf.Bytes(), img) {
		t.Fatalf("bob's download of the image he was sent: %d bytes, %v", buf.Len(), err)
	}
}

// TestUploadLimits: an upload over --max-upload-size is a 413, one over the day's quota a
// 429 with no RetryAfter (waiting a few seconds would not help), both as *Error.
func TestUploadLimits(t *testing.T) {
	s := attachServer(t, func(c *server.Config) { c.Chat.MaxUploadSize, c.Chat.UploadQuota = 1000, 2500 })
	ctx := testCtx(t)
	alice := newTestClient(s, s.User(t, "alice"), nil)
	up := func(n int) error {
		_, err := alice.Upload(ctx, bytes.NewReader(make([]byte, n)), int64(n), client.UploadOptions{})
		return err
	}
	var e *client.Error
	if err := up(1001); !errors.As(err, &e) || e.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload over the size limit: %v, want a 413 *Error", err)
	}
	for range 2 {
		if err := up(1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := up(600); !errors.As(err, &e) || e.Code != http.StatusTooManyRequests || e.RetryAfter != 0 {
		t.Fatalf("upload over the quota: %v, want a 429 *Error without RetryAfter", err)
	}
}
