package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// Attachments serves attachments' bytes (internal/attach): tus uploads, downloads and
// signed URLs. The gateway authenticates and rate-limits; Attachments does the rest.
type Attachments interface {
	// ServeUpload serves a tus request of me's: id is "" for the creation (POST).
	ServeUpload(w http.ResponseWriter, r *http.Request, me chat.Identity, id string)
	// ServeContent serves an attachment's bytes or thumbnail to me, or, with me nil, to the
	// holder of the signed URL the request carries.
	ServeContent(w http.ResponseWriter, r *http.Request, me *chat.Identity, id string, thumb bool)
	// Info returns the attachment as me may see it.
	Info(ctx context.Context, me chat.Identity, id string) (protocol.Attachment, error)
	// SignURLs returns signed URLs of the attachment, valid for expiresIn (0: the default).
	SignURLs(ctx context.Context, me chat.Identity, id string, expiresIn time.Duration) (protocol.AttachmentURLs, error)
}

// attachmentRoutes registers section 14's endpoints, when attachments are on.
func (g *Gateway) attachmentRoutes() {
	if g.attachments == nil {
		return
	}
	m := g.mux
	m.Handle("OPTIONS /v1/uploads", g.upload(false))
	m.Handle("POST /v1/uploads", g.upload(false))
	m.Handle("HEAD /v1/uploads/{id}", g.upload(true))
	m.Handle("PATCH /v1/uploads/{id}", g.upload(true))
	m.Handle("GET /v1/attachments/{id}", g.client(g.attachmentInfo))
	m.Handle("POST /v1/attachments/{id}/urls", g.client(g.attachmentURLs))
	m.HandleFunc("GET /v1/attachments/{id}/content", g.download(false))
	m.HandleFunc("GET /v1/attachments/{id}/thumbnail", g.download(true))
}

// upload authenticates a tus request and hands it on with its body unread: tusd streams
// it to disk. OPTIONS needs no token (it is how a tus client learns the server's limits).
func (g *Gateway) upload(withID bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var me chat.Identity
		if r.Method != http.MethodOptions {
			var err error
			if me, err = g.rateLimitedClient(r); err != nil {
				g.refuse(w, r, err)
				return
			}
		}
		id := ""
		if withID {
			id = r.PathValue("id")
		}
		g.attachments.ServeUpload(w, r, me, id)
	})
}

// rateLimitedClient authenticates a client's request and counts it against the device's
// request rate, for the routes that write their own responses.
func (g *Gateway) rateLimitedClient(r *http.Request) (chat.Identity, error) {
	sess, err := g.authenticate(r, false)
	if err == nil {
		err = g.allow(sess.Identity, false)
	}
	return sess.Identity, err
}

// download serves an attachment's bytes to a bearer of a token, or of a signed URL (a
// query with sig, for an <img> tag or a CDN).
func (g *Gateway) download(thumb bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if _, bearer := bearerToken(r); !bearer && r.URL.Query().Has("sig") {
			g.attachments.ServeContent(w, r, nil, id, thumb)
			return
		}
		me, err := g.rateLimitedClient(r)
		if err != nil {
			g.refuse(w, r, err)
			return
		}
		g.attachments.ServeContent(w, r, &me, id, thumb)
	}
}

func (g *Gateway) attachmentInfo(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	a, err := g.attachments.Info(r.Context(), me, r.PathValue("id"))
	return http.StatusOK, a, err
}

func (g *Gateway) attachmentURLs(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	var req protocol.AttachmentURLsRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return 0, nil, invalidf("body must be a JSON object: %v", err)
		}
	}
	if req.ExpiresIn < 0 {
		return 0, nil, invalidf("expires_in must be positive")
	}
	urls, err := g.attachments.SignURLs(r.Context(), me, r.PathValue("id"), time.Duration(req.ExpiresIn)*time.Second)
	return http.StatusOK, urls, err
}

// ErrorReply is the status and JSON body the API answers err with, for a part of the
// server that writes its own responses (tusd's uploads).
func ErrorReply(err error) (int, []byte) {
	code := statusOf(err)
	b, _ := json.Marshal(protocol.ErrorBody{Code: code, Error: errorMessage(err, code)})
	return code, append(b, '\n') // as writeJSON ends every body
}
