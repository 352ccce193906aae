package attach

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/media"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Info returns the attachment id as me may see it (chat.Service.Attachment).
func (s *Service) Info(ctx context.Context, me chat.Identity, id string) (protocol.Attachment, error) {
	a, err := s.chat.Attachment(ctx, me, id)
	if err != nil {
		return protocol.Attachment{}, err
	}
	return chat.AttachmentWire(a), nil
}

// ServeContent serves the bytes of attachment id (its thumbnail when thumb) to me, or to
// the holder of a signed URL when me is nil and the request's query signs it.
func (s *Service) ServeContent(w http.ResponseWriter, r *http.Request, me *chat.Identity, id string, thumb bool) {
	ctx := r.Context()
	var a store.Attachment
	var err error
	signed := me == nil
	if signed {
		a, err = s.signedAttachment(ctx, r.URL.Query(), id, thumb)
	} else {
		a, err = s.chat.Attachment(ctx, *me, id)
	}
	switch {
	case err != nil:
		s.writeError(w, err)
		return
	case a.State != store.AttachmentComplete, thumb && !a.Thumbnail:
		s.writeError(w, fmt.Errorf("%w: no such attachment", chat.ErrNotFound))
		return
	}
	key, ctype, etag := contentKey(id), a.MimeType, `"`+a.SHA256+`"`
	if thumb {
		key, ctype, etag = thumbKey(id), "image/jpeg", `"t-`+a.SHA256+`"`
	}
	obj, err := s.blobs.Open(ctx, key)
	if err != nil {
		s.writeError(w, blobErr(err))
		return
	}
	defer obj.Close()
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("ETag", etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	if signed {
		// The URL itself is the credential: a cache may keep what it names.
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "private, max-age=31536000, immutable")
	}
	if thumb || media.Inline(ctype) {
		h.Set("Content-Disposition", "inline")
	} else {
		h.Set("Content-Disposition", "attachment")
	}
	http.ServeContent(&timelyWriter{w: w}, r, "", obj.ModTime(), obj)
}

// timelyWriter extends the write deadline before each write, so that a large download to a
// slow client is cut only when the client stops taking bytes, not after a fixed time.
type timelyWriter struct {
	w http.ResponseWriter
}

func (t *timelyWriter) Header() http.Header  { return t.w.Header() }
func (t *timelyWriter) WriteHeader(code int) { t.w.WriteHeader(code) }
func (t *timelyWriter) Write(p []byte) (int, error) {
	_ = http.NewResponseController(t.w).SetWriteDeadline(time.Now().Add(writeTimeout))
	return t.w.Write(p)
}

// writeTimeout is how long one write of a download may take: http.ServeContent writes
// 32 KiB at a time.
const writeTimeout = 30 * time.Second

// SignURLs returns URLs that fetch attachment id, which me may see, without a bearer token
// for expiresIn (at most, and by default, Config.URLExpiry).
func (s *Service) SignURLs(ctx context.Context, me chat.Identity, id string, expiresIn time.Duration) (protocol.AttachmentURLs, error) {
	switch {
	case expiresIn == 0:
		expiresIn = s.cfg.URLExpiry
	case expiresIn < time.Second || expiresIn > s.cfg.URLExpiry:
		return protocol.AttachmentURLs{}, fmt.Errorf("%w: expires_in must be 1 to %d seconds", chat.ErrInvalid, int(s.cfg.URLExpiry/time.Second))
	}
	a, err := s.chat.Attachment(ctx, me, id)
	if err != nil {
		return protocol.AttachmentURLs{}, err
	}
	if a.State != store.AttachmentComplete {
		return protocol.AttachmentURLs{}, fmt.Errorf("%w: the upload is not complete", chat.ErrConflict)
	}
	exp := s.chat.Now().Add(expiresIn).Unix()
	out := protocol.AttachmentURLs{Content: s.signedPath(id, false, exp), ExpiresAt: exp * 1000}
	if a.Thumbnail {
		out.Thumbnail = s.signedPath(id, true, exp)
	}
	return out, nil
}

func (s *Service) signedPath(id string, thumb bool, exp int64) string {
	form := "content"
	if thumb {
		form = "thumbnail"
	}
	return "/v1/attachments/" + id + "/" + form + "?expires=" + strconv.FormatInt(exp, 10) + "&sig=" + s.sign(id, thumb, exp)
}

// sign is the signature of one attachment's one form until exp (Unix seconds).
func (s *Service) sign(id string, thumb bool, exp int64) string {
	m := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(m, "attachment\n%s\n%t\n%d", id, thumb, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedAttachment checks a signed URL's query and returns the attachment it names. A
// signature that does not match, or has expired, is the same 404 as an unknown id.
func (s *Service) signedAttachment(ctx context.Context, q url.Values, id string, thumb bool) (store.Attachment, error) {
	notFound := fmt.Errorf("%w: no such attachment, or the URL has expired", chat.ErrNotFound)
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || s.chat.Now().Unix() > exp || !protocol.ValidAttachmentID(id) ||
		!hmac.Equal([]byte(q.Get("sig")), []byte(s.sign(id, thumb, exp))) {
		return store.Attachment{}, notFound
	}
	a, err := s.chat.AttachmentRow(ctx, id)
	if err != nil {
		return store.Attachment{}, err
	}
	return a, nil
}
