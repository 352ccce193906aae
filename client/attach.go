package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parleychat/parley/protocol"
)

// This file holds attachments (section 14): uploads over tus 1.0 (core and creation, the
// protocol the server's tusd speaks), downloads and signed URLs.

// DefaultChunkSize is how many bytes one PATCH of Upload carries by default: a dropped
// connection costs at most this much to send again.
const DefaultChunkSize = 8 << 20

// defaultUploadRetries bounds the consecutive failed attempts of an upload.
const defaultUploadRetries = 8

// UploadOptions tune Upload and ResumeUpload. The zero value is ready to use.
type UploadOptions struct {
	// ChunkSize is the most bytes one PATCH sends; default DefaultChunkSize.
	ChunkSize int64
	// MaxRetries is how many failed attempts in a row (transport errors, 5xx, a 409 offset
	// mismatch, a 423 lock, a 429 with Retry-After) an upload survives before it returns the
	// last error; every acknowledged chunk resets the count. Default 8; negative: none.
	MaxRetries int
	// OnCreated, if set, receives the attachment id as soon as the server has created the
	// upload, before any byte is sent: persist it to call ResumeUpload after a restart.
	OnCreated func(id string)
	// OnProgress, if set, is called as bytes leave, with the bytes sent so far and the total,
	// never concurrently (but maybe from the HTTP transport's goroutine). After a failed
	// attempt it goes back to what the server acknowledged; it ends with (total, total).
	OnProgress func(sent, total int64)
}

// Upload sends size bytes read from r as a new attachment and returns it as the server
// describes it once complete (MimeType, SHA256, dimensions, Thumbnail). r is read in chunks
// of opts.ChunkSize with ReadAt, never held whole in memory; *os.File, *bytes.Reader and
// *strings.Reader all qualify, and io.NewSectionReader makes one of part of a file.
//
// The creation (POST /v1/uploads) is made once: a failure there is returned as is, since a
// retry would create (and count against the daily quota) another upload. 413: size is over
// the server's --max-upload-size; 429 without RetryAfter: the day's upload quota is spent.
// After the creation, a transport error or a 5xx on a PATCH makes Upload ask the server
// (HEAD) how much it holds and go on from there, after a backoff (Options.Backoff), up to
// opts.MaxRetries times in a row. If ctx ends, or the retries run out, the error names the
// attachment id (also given to opts.OnCreated): ResumeUpload continues it.
func (c *Client) Upload(ctx context.Context, r io.ReaderAt, size int64, opts UploadOptions) (Attachment, error) {
	if size < 0 {
		return Attachment{}, &Error{Code: http.StatusBadRequest, Message: "negative upload size (checked locally)"}
	}
	id, err := c.createUpload(ctx, size)
	if err != nil {
		return Attachment{}, err
	}
	if opts.OnCreated != nil {
		opts.OnCreated(id)
	}
	return c.sendUpload(ctx, id, r, size, 0, opts)
}

// ResumeUpload continues upload id (from Upload or its OnCreated) with the same size bytes
// of r: it asks the server how much it holds and sends the rest, retrying as Upload does.
// An upload already complete returns at once. 404: no such upload of the caller's (another
// user's, or collected after a day idle).
func (c *Client) ResumeUpload(ctx context.Context, id string, r io.ReaderAt, size int64, opts UploadOptions) (Attachment, error) {
	if !protocol.ValidAttachmentID(id) {
		return Attachment{}, &Error{Code: http.StatusBadRequest, Message: "invalid attachment id (checked locally)"}
	}
	return c.sendUpload(ctx, id, r, size, -1, opts)
}

// UploadOffset returns how many bytes of upload id the server holds (tus HEAD); a complete
// upload answers its size.
func (c *Client) UploadOffset(ctx context.Context, id string) (int64, error) {
	resp, err := c.tus(ctx, http.MethodHead, uploadPath(id), nil, 0, nil)
	if err != nil {
		return 0, err
	}
	defer closeResponse(resp)
	return headerOffset(resp)
}

// Attachment returns what the server knows of attachment id. 404: unknown, or one the
// caller may not see (neither their own upload nor carried by a message they can read).
func (c *Client) Attachment(ctx context.Context, id string) (Attachment, error) {
	var out Attachment
	_, err := c.http.do(ctx, http.MethodGet, attachmentPath(id, ""), nil, nil, &out)
	return out, err
}

// AttachmentURLs returns URLs that fetch attachment id without a token until ExpiresAt, for
// an <img> tag, a media player or a CDN. expiresIn is rounded up to whole seconds (at most
// an hour; 0: the server's default, an hour). The URLs are paths with a query, relative to
// the server's root: join them to BaseURL's scheme and host.
func (c *Client) AttachmentURLs(ctx context.Context, id string, expiresIn time.Duration) (AttachmentURLs, error) {
	req := protocol.AttachmentURLsRequest{ExpiresIn: int((expiresIn + time.Second - 1) / time.Second)}
	var out AttachmentURLs
	_, err := c.http.do(ctx, http.MethodPost, attachmentPath(id, "/urls"), nil, req, &out)
	return out, err
}

// AttachmentBody is an open download: the bytes of an attachment or of its thumbnail, from
// Offset on. Close it.
type AttachmentBody struct {
	io.ReadCloser
	Offset      int64  // the position of the body's first byte in the file
	Length      int64  // bytes the body carries; -1 if the server did not say
	Size        int64  // the whole file's bytes; -1 if the server did not say
	ContentType string // the server's sniffed MIME type (image/jpeg for a thumbnail)
	ETag        string // strong: the same for the same bytes, forever
}

// OpenAttachment opens the bytes of attachment id, or its thumbnail (a JPEG; 404 when
// Attachment's Thumbnail is false). 404 also for an attachment the caller may not see or
// whose upload is not complete.
func (c *Client) OpenAttachment(ctx context.Context, id string, thumbnail bool) (*AttachmentBody, error) {
	return c.openAttachment(ctx, id, thumbnail, 0)
}

// OpenAttachmentRange opens the bytes of attachment id from offset to the end, to resume a
// download cut short: append the body to what was already written. Attachments never change,
// so the two parts are of the same file. 416: offset is at or past the end.
func (c *Client) OpenAttachmentRange(ctx context.Context, id string, offset int64) (*AttachmentBody, error) {
	if offset < 0 {
		return nil, &Error{Code: http.StatusBadRequest, Message: "negative offset (checked locally)"}
	}
	return c.openAttachment(ctx, id, false, offset)
}

// ErrChecksum is returned (wrapped) by Download when the bytes received are not those the
// server hashed at upload.
var ErrChecksum = errors.New("parley: downloaded bytes do not match the attachment's sha256")

// Download writes the bytes of attachment id to w and returns the attachment. It checks
// them against the attachment's SHA256 as they pass and returns an error wrapping
// ErrChecksum if they differ (w has then received them all the same). It does not retry; to
// resume after a failure, use OpenAttachmentRange from the bytes w holds.
func (c *Client) Download(ctx context.Context, id string, w io.Writer) (Attachment, error) {
	a, err := c.Attachment(ctx, id)
	if err != nil {
		return Attachment{}, err
	}
	body, err := c.OpenAttachment(ctx, id, false)
	if err != nil {
		return a, err
	}
	defer body.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), body)
	if err != nil {
		return a, fmt.Errorf("parley: download %s: %w", id, err)
	}
	if n != a.Size || !sumIs(h, a.SHA256) {
		return a, fmt.Errorf("parley: download %s (%d bytes of %d): %w", id, n, a.Size, ErrChecksum)
	}
	return a, nil
}

// SendAttachment sends a message carrying an uploaded attachment: content type
// ContentImage, ContentFile, ContentAudio or ContentVideo, with content
// {"attachment_id", "name", "caption"} (name and caption may be empty). The server stores the
// message with content.attachment, the upload's metadata, filled in; Message.Attachment reads
// it back. It retries as Send does. 404: no complete upload of the caller's with that id.
func (c *Client) SendAttachment(ctx context.Context, convID string, contentType int, id, name, caption string) (MessageAck, error) {
	if !protocol.IsAttachmentContent(contentType) {
		return MessageAck{}, &Error{Code: http.StatusBadRequest, Message: "content type of an attachment must be 2 to 5 (checked locally)"}
	}
	return c.Send(ctx, convID, contentType, AttachmentContent{AttachmentID: id, Name: name, Caption: caption}, nil)
}

// createUpload is tus creation: POST /v1/uploads with Upload-Length; the id is the last
// segment of the Location the server answers.
func (c *Client) createUpload(ctx context.Context, size int64) (string, error) {
	h := http.Header{"Upload-Length": {strconv.FormatInt(size, 10)}}
	resp, err := c.tus(ctx, http.MethodPost, "/v1/uploads", nil, 0, h)
	if err != nil {
		return "", err
	}
	defer closeResponse(resp)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return "", fmt.Errorf("parley: create upload: bad Location %q: %w", resp.Header.Get("Location"), err)
	}
	id := path.Base(loc.Path)
	if !protocol.ValidAttachmentID(id) {
		return "", fmt.Errorf("parley: create upload: Location %q names no attachment", resp.Header.Get("Location"))
	}
	return id, nil
}

// sendUpload PATCHes upload id from offset (-1: ask the server first) to size.
func (c *Client) sendUpload(ctx context.Context, id string, r io.ReaderAt, size, offset int64, opts UploadOptions) (Attachment, error) {
	chunk := opts.ChunkSize
	if chunk <= 0 {
		chunk = DefaultChunkSize
	}
	retries := opts.MaxRetries
	if retries == 0 {
		retries = defaultUploadRetries
	}
	prog := &uploadProgress{fn: opts.OnProgress, total: size}
	failures := 0
	for {
		var err error
		if offset < 0 {
			offset, err = c.UploadOffset(ctx, id)
			if err == nil && offset > size {
				return Attachment{}, fmt.Errorf("parley: upload %s: the server holds %d bytes of a file of %d", id, offset, size)
			}
		}
		if err == nil {
			if offset == size {
				break
			}
			var next int64
			next, err = c.patch(ctx, id, r, offset, min(chunk, size-offset), prog)
			if err == nil {
				offset, failures = next, 0
				continue
			}
		}
		if ctx.Err() != nil {
			return Attachment{}, fmt.Errorf("parley: upload %s: %w (last attempt: %v)", id, ctx.Err(), err)
		}
		wait, retry := uploadRetryWait(err, c.opts.Backoff, failures)
		if !retry || failures >= retries {
			return Attachment{}, fmt.Errorf("parley: upload %s: %w", id, err)
		}
		failures++
		c.log.Debug("parley: upload retry", "id", id, "attempt", failures, "wait", wait, "err", err)
		if !sleepCtx(ctx, wait) {
			return Attachment{}, fmt.Errorf("parley: upload %s: %w (last attempt: %v)", id, ctx.Err(), err)
		}
		offset = -1 // whatever happened, the server's count is the one to trust
	}
	prog.start(size)
	return c.Attachment(ctx, id)
}

// patch sends n bytes of r from offset and returns the offset the server acknowledges.
func (c *Client) patch(ctx context.Context, id string, r io.ReaderAt, offset, n int64, prog *uploadProgress) (int64, error) {
	body := &countingReader{r: io.NewSectionReader(r, offset, n), prog: prog, gen: prog.start(offset), sent: offset}
	h := http.Header{
		"Upload-Offset": {strconv.FormatInt(offset, 10)},
		"Content-Type":  {"application/offset+octet-stream"},
	}
	resp, err := c.tus(ctx, http.MethodPatch, uploadPath(id), body, n, h)
	if err != nil {
		return 0, err
	}
	defer closeResponse(resp)
	next, err := headerOffset(resp)
	if err == nil && next <= offset {
		err = fmt.Errorf("parley: PATCH at %d acknowledged offset %d", offset, next)
	}
	return next, err
}

// tus sends one tus request with the token and Tus-Resumable. A non-2xx answer is an *Error
// (the API's JSON body where the server wrote one); the caller closes a 2xx answer's body.
func (c *Client) tus(ctx context.Context, method, p string, body io.Reader, n int64, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.http.base+p, body)
	if err != nil {
		return nil, fmt.Errorf("parley: %s %s: %w", method, p, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.ContentLength = n
	}
	req.Header.Set("Authorization", "Bearer "+c.http.secret)
	req.Header.Set("Tus-Resumable", "1.0.0")
	resp, err := c.http.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer closeResponse(resp)
		return nil, errorFromResponse(resp)
	}
	return resp, nil
}

// openAttachment GETs an attachment's content (from offset, with a Range) or thumbnail.
func (c *Client) openAttachment(ctx context.Context, id string, thumbnail bool, offset int64) (*AttachmentBody, error) {
	suffix := "/content"
	if thumbnail {
		suffix = "/thumbnail"
	}
	p := attachmentPath(id, suffix)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.http.base+p, nil)
	if err != nil {
		return nil, fmt.Errorf("parley: GET %s: %w", p, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.http.secret)
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := c.http.hc.Do(req)
	if err != nil {
		return nil, err
	}
	b := &AttachmentBody{
		ReadCloser: resp.Body, Length: resp.ContentLength, Size: resp.ContentLength,
		ContentType: resp.Header.Get("Content-Type"), ETag: resp.Header.Get("ETag"),
	}
	switch {
	case resp.StatusCode == http.StatusOK && offset == 0:
		return b, nil
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		start, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if ok && start == offset {
			b.Offset, b.Size = start, size
			return b, nil
		}
		closeResponse(resp)
		return nil, fmt.Errorf("parley: GET %s from %d: answered Content-Range %q", p, offset, resp.Header.Get("Content-Range"))
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		closeResponse(resp)
		return nil, fmt.Errorf("parley: GET %s from %d: answered %d", p, offset, resp.StatusCode)
	}
	defer closeResponse(resp)
	return nil, errorFromResponse(resp)
}

// parseContentRange reads "bytes start-end/size".
func parseContentRange(s string) (start, size int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, total, found := strings.Cut(rest, "/")
	first, _, found2 := strings.Cut(rng, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	size, err2 := strconv.ParseInt(total, 10, 64)
	if total == "*" {
		size, err2 = -1, nil
	}
	return start, size, err1 == nil && err2 == nil
}

// uploadRetryWait decides whether a failed upload request is worth repeating from the
// server's offset, and after how long. A 409 (offset mismatch: an earlier PATCH got further
// than its answer said) and a 423 (the upload is still locked by a PATCH the server has not
// seen end) are cured by asking the offset again.
func uploadRetryWait(err error, b Backoff, attempt int) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return b.Delay(attempt), true
	}
	switch {
	case e.Code == http.StatusTooManyRequests && e.RetryAfter > 0:
		return e.RetryAfter, true
	case e.Code == http.StatusConflict, e.Code == http.StatusLocked, e.Code == http.StatusRequestTimeout, e.Code >= 500:
		return b.Delay(attempt), true
	}
	return 0, false
}

// headerOffset reads a tus answer's Upload-Offset.
func headerOffset(resp *http.Response) (int64, error) {
	off, err := strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
	if err != nil || off < 0 {
		return 0, fmt.Errorf("parley: %s %s: bad Upload-Offset %q", resp.Request.Method, resp.Request.URL.Path, resp.Header.Get("Upload-Offset"))
	}
	return off, nil
}

// closeResponse drains a little of what is left, so the connection returns to the pool.
func closeResponse(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
}

func sumIs(h hash.Hash, want string) bool {
	return want != "" && hex.EncodeToString(h.Sum(nil)) == want
}

func uploadPath(id string) string { return "/v1/uploads/" + url.PathEscape(id) }

func attachmentPath(id, suffix string) string {
	return "/v1/attachments/" + url.PathEscape(id) + suffix
}

// uploadProgress calls OnProgress never concurrently, and only for the current PATCH: the
// HTTP transport may still be reading a failed PATCH's body after the request returned.
type uploadProgress struct {
	fn    func(sent, total int64)
	total int64
	mu    sync.Mutex
	gen   int // of the current PATCH
}

// start begins a new attempt at offset (reported) and returns its generation.
func (p *uploadProgress) start(offset int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	if p.fn != nil {
		p.fn(offset, p.total)
	}
	return p.gen
}

func (p *uploadProgress) report(gen int, sent int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen == p.gen {
		p.fn(sent, p.total)
	}
}

// countingReader reports the bytes read through it as a PATCH's body is sent.
type countingReader struct {
	r    io.Reader
	prog *uploadProgress
	gen  int
	sent int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.sent += int64(n)
		c.prog.report(c.gen, c.sent)
	}
	return n, err
}
