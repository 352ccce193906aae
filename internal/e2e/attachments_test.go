package e2e

import (
	"bytes"
	"compress/zlib"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// The attachment tests speak tus 1.0 over real sockets as any tus client does: POST
// /v1/uploads with Upload-Length, then PATCH from the offset the server acknowledged.

// createUpload starts an upload of size bytes and returns its attachment id.
func (n *node) createUpload(t testing.TB, token string, size int64) string {
	t.Helper()
	r := n.tus(t, "POST", "/v1/uploads", token, nil, http.Header{"Upload-Length": {strconv.FormatInt(size, 10)}})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/uploads = %d %s, want 201", r.status, r.raw)
	}
	loc, err := url.Parse(r.header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.Path, "/v1/uploads/") {
		t.Fatalf("Location %q: want /v1/uploads/{id}", r.header.Get("Location"))
	}
	return path.Base(loc.Path)
}

// tus sends one tus request: Tus-Resumable and, for a PATCH, the offset+octet-stream type.
func (n *node) tus(t testing.TB, method, p, token string, body io.Reader, h http.Header) response {
	t.Helper()
	r, err := n.tusRequest(method, p, token, body, h)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (n *node) tusRequest(method, p, token string, body io.Reader, h http.Header) (response, error) {
	req, err := http.NewRequest(method, n.URL+p, body)
	if err != nil {
		return response{}, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method == "PATCH" {
		req.Header.Set("Content-Type", "application/offset+octet-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, raw: raw}, err
}

// uploadOffset asks the server how much of upload id it holds.
func (n *node) uploadOffset(t testing.TB, token, id string) int64 {
	t.Helper()
	r := n.tus(t, "HEAD", "/v1/uploads/"+id, token, nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("HEAD /v1/uploads/%s = %d, want 200", id, r.status)
	}
	off, err := strconv.ParseInt(r.header.Get("Upload-Offset"), 10, 64)
	if err != nil {
		t.Fatalf("HEAD: Upload-Offset %q", r.header.Get("Upload-Offset"))
	}
	return off
}

// patch sends data from offset and returns the new offset.
func (n *node) patch(t testing.TB, token, id string, offset int64, data []byte) int64 {
	t.Helper()
	r := n.tus(t, "PATCH", "/v1/uploads/"+id, token, bytes.NewReader(data), http.Header{"Upload-Offset": {strconv.FormatInt(offset, 10)}})
	if r.status != http.StatusNoContent {
		t.Fatalf("PATCH /v1/uploads/%s at %d = %d %s, want 204", id, offset, r.status, r.raw)
	}
	off, _ := strconv.ParseInt(r.header.Get("Upload-Offset"), 10, 64)
	return off
}

// upload uploads data whole and returns the attachment as GET /v1/attachments/{id} answers.
func (n *node) upload(t testing.TB, token string, data []byte) map[string]any {
	t.Helper()
	id := n.createUpload(t, token, int64(len(data)))
	if off := n.patch(t, token, id, 0, data); off != int64(len(data)) {
		t.Fatalf("PATCH of the whole file: offset %d, want %d", off, len(data))
	}
	return n.ok(t, "GET", "/v1/attachments/"+id, token, nil)
}

// download fetches an attachment's bytes (or thumbnail) with token, and must answer want.
func (n *node) download(t testing.TB, token, id, form string, want int, h http.Header) response {
	t.Helper()
	req, err := http.NewRequest("GET", n.URL+"/v1/attachments/"+id+"/"+form, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET /v1/attachments/%s/%s = %d %s, want %d", id, form, resp.StatusCode, raw, want)
	}
	return response{status: resp.StatusCode, header: resp.Header, raw: raw}
}

// sendAttachment sends a message of content type ct carrying attachment id, with extra
// content fields, and returns the answer's status and body.
func (n *node) sendAttachment(t testing.TB, token, convID, clientID string, ct int, id string, fields map[string]any) response {
	t.Helper()
	content := map[string]any{"attachment_id": id}
	for k, v := range fields {
		content[k] = v
	}
	return n.call(t, "POST", "/v1/messages", token, map[string]any{"conv_id": convID, "client_msg_id": clientID, "content_type": ct, "content": content})
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// pngImage returns a w×h PNG.
func pngImage(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 128, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAttachmentUploadResumes drops an upload's connection halfway, resumes it from the
// offset the server acknowledged, and downloads the file byte for byte; a range request
// reads its part alone, with a strong ETag and immutable caching.
func TestAttachmentUploadResumes(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	data := randomBytes(3<<20+17, 1)
	id := n.createUpload(t, alice, int64(len(data)))

	// The first PATCH sends 1 MiB and then the connection fails.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(data[:1<<20])
		pw.CloseWithError(errors.New("connection dropped"))
	}()
	if _, err := n.tusRequest("PATCH", "/v1/uploads/"+id, alice, pr, http.Header{"Upload-Offset": {"0"}}); err == nil {
		t.Fatal("the PATCH whose body failed succeeded")
	}
	// On a cluster the upload resumes on another node than the one that took it.
	resume := n
	if len(n.Nodes) > 1 {
		resume = &node{n.Nodes[1]}
	}
	var off int64
	eventually(t, "the server acknowledges what the dropped PATCH carried", func() bool {
		off = resume.uploadOffset(t, alice, id)
		return off > 0
	})
	if off > 1<<20 {
		t.Fatalf("offset %d after 1 MiB sent", off)
	}
	if got := n.ok(t, "GET", "/v1/attachments/"+id, alice, nil); got["complete"] != false {
		t.Fatalf("an upload half done: %v", got)
	}
	// As a tus client does: a 409 (the offset moved on meanwhile: on a cluster the node that
	// took the dropped PATCH may still be writing its last bytes) asks HEAD again.
	eventually(t, "the resumed PATCH completes the upload", func() bool {
		r := resume.tus(t, "PATCH", "/v1/uploads/"+id, alice, bytes.NewReader(data[off:]), http.Header{"Upload-Offset": {strconv.FormatInt(off, 10)}})
		switch r.status {
		case http.StatusNoContent:
			if end := r.header.Get("Upload-Offset"); end != strconv.Itoa(len(data)) {
				t.Fatalf("resumed PATCH: offset %s, want %d", end, len(data))
			}
			return true
		case http.StatusConflict:
			off = resume.uploadOffset(t, alice, id)
			return false
		}
		t.Fatalf("resumed PATCH at %d = %d %s", off, r.status, r.raw)
		return false
	})
	info := n.ok(t, "GET", "/v1/attachments/"+id, alice, nil)
	wantFields(t, "the attachment", info, map[string]any{
		"id": id, "complete": true, "size": float64(len(data)), "sha256": sha(data),
		"mime_type": "application/octet-stream", "thumbnail": false,
	})
	if n.uploadOffset(t, alice, id) != int64(len(data)) {
		t.Error("HEAD of a complete upload: not the full offset")
	}

	got := n.download(t, alice, id, "content", http.StatusOK, nil)
	if sha(got.raw) != sha(data) {
		t.Fatalf("downloaded %d bytes, SHA-256 %s; uploaded %d, %s", len(got.raw), sha(got.raw), len(data), sha(data))
	}
	etag := got.header.Get("ETag")
	if etag != `"`+sha(data)+`"` {
		t.Errorf("ETag %q, want the quoted SHA-256 (strong)", etag)
	}
	if cc := got.header.Get("Cache-Control"); !strings.Contains(cc, "immutable") || !strings.Contains(cc, "private") {
		t.Errorf("Cache-Control %q, want private, immutable", cc)
	}
	part := n.download(t, alice, id, "content", http.StatusPartialContent, http.Header{"Range": {"bytes=1048570-1048600"}})
	if !bytes.Equal(part.raw, data[1048570:1048601]) {
		t.Errorf("range: %d bytes, not the file's", len(part.raw))
	}
	n.download(t, alice, id, "content", http.StatusNotModified, http.Header{"If-None-Match": {etag}})
}

// TestAttachmentHeadTakesOverAPatch: a client whose PATCH hangs (its connection half open)
// asks HEAD and resumes; the server interrupts the hanging PATCH at once rather than after
// its read timeout, keeps what it had written, and the resumed PATCH completes the upload.
// Several rounds, under the race detector, cover the hand-over of the hanging request's
// body.
func TestAttachmentHeadTakesOverAPatch(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads a PATCH's body before the node does, so no node holds a hanging one")
	n := start(t)
	alice := n.user(t, "alice")
	const chunk = 64 << 10
	const rounds = 4
	data := randomBytes(rounds*chunk+5, 2)
	id := n.createUpload(t, alice, int64(len(data)))
	var off int64
	var hanging []chan error
	for round := range rounds {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		hanging = append(hanging, done)
		go func(off int64) {
			_, err := n.tusRequest("PATCH", "/v1/uploads/"+id, alice, pr, http.Header{"Upload-Offset": {strconv.FormatInt(off, 10)}})
			done <- err
		}(off)
		if _, err := pw.Write(data[off : off+chunk]); err != nil {
			t.Fatalf("round %d: writing the PATCH body: %v", round, err)
		}
		// A HEAD that comes before the PATCH holds the upload finds nothing to interrupt, and
		// the client asks again. One that answers an offset past off came after the PATCH had
		// written and stopped it: nothing else lets the PATCH go, its body never ends.
		eventually(t, "a HEAD interrupts the hanging PATCH", func() bool {
			got := n.uploadOffset(t, alice, id)
			if got < off || got > off+chunk {
				t.Fatalf("round %d: HEAD offset %d, want within [%d, %d]", round, got, off, off+chunk)
			}
			select {
			case <-done:
				done <- nil // stopped before it wrote a byte
				return true
			default:
				return got > off
			}
		})
		off = n.uploadOffset(t, alice, id)
		pw.Close() // the old connection may linger until its body ends; the upload does not wait
	}
	for off < int64(len(data)) {
		off = n.patch(t, alice, id, off, data[off:])
	}
	if got := n.download(t, alice, id, "content", http.StatusOK, nil); sha(got.raw) != sha(data) {
		t.Fatalf("downloaded %d bytes, not the %d uploaded", len(got.raw), len(data))
	}
	for _, done := range hanging {
		<-done
	}
}

// TestAttachmentAccess: the uploader and the members who can see a message carrying the
// attachment may download it; a stranger, a member who joined after, one who deleted the
// conversation's history, and everyone once the message is recalled get the 404 of an
// unknown id. Sends naming another's, an unfinished or an unknown upload are a clear 400.
func TestAttachmentAccess(t *testing.T) {
	n := start(t)
	alice, bob, carol := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol")
	dave, erin := n.user(t, "dave"), n.user(t, "erin")
	g := n.group(t, alice, "photos", false, "bob", "erin")["conv_id"].(string)
	img := pngImage(t, 640, 480)
	att := n.upload(t, alice, img)
	id := att["id"].(string)
	wantFields(t, "a PNG", att, map[string]any{"mime_type": "image/png", "width": float64(640), "height": float64(480), "thumbnail": true})
	if p, _ := att["preview"].(string); !strings.HasPrefix(p, "data:image/jpeg;base64,") {
		t.Errorf("preview %.40q, want a data: URL", p)
	}
	unknown := "a_" + strings.Repeat("a", 26)
	none := n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+unknown, bob, nil)

	// Before any message, only alice sees it.
	n.ok(t, "GET", "/v1/attachments/"+id, alice, nil)
	if r := n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+id, bob, nil); !bytes.Equal(r.raw, none.raw) {
		t.Errorf("bob before the message: %s, want the unknown id's %s", r.raw, none.raw)
	}

	r := n.sendAttachment(t, alice, g, "p1", 2, id, map[string]any{"caption": "the view", "name": "view.png", "attachment": map[string]any{"size": 1}})
	if r.status != http.StatusOK {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	seq := num(object(t, r.raw)["seq"])
	msgs := n.history(t, bob, g, 0)
	content := obj(t, msgs[len(msgs)-1]["content"])
	wantFields(t, "the message's content", content, map[string]any{"attachment_id": id, "caption": "the view", "name": "view.png"})
	meta := obj(t, content["attachment"])
	wantFields(t, "content.attachment (the server's, not the client's)", meta, map[string]any{
		"id": id, "size": float64(len(img)), "mime_type": "image/png", "width": float64(640), "sha256": sha(img),
	})

	// Bob (a member) may; carol (a stranger) may not.
	n.ok(t, "GET", "/v1/attachments/"+id, bob, nil)
	if got := n.download(t, bob, id, "content", http.StatusOK, nil); !bytes.Equal(got.raw, img) {
		t.Error("bob's download differs")
	}
	thumb := n.download(t, bob, id, "thumbnail", http.StatusOK, nil)
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(thumb.raw)); err != nil || max(cfg.Width, cfg.Height) != 320 {
		t.Errorf("thumbnail: %v %+v, want 320 px on the long side", err, cfg)
	}
	for _, who := range []struct{ name, token string }{{"carol", carol}} {
		for _, p := range []string{"", "/content", "/thumbnail"} {
			if r := n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+id+p, who.token, nil); !bytes.Equal(r.raw, none.raw) {
				t.Errorf("%s GET %s: %s, want the unknown id's answer", who.name, p, r.raw)
			}
		}
	}
	// Dave joins after the message: he cannot see it, so not its file.
	n.ok(t, "POST", "/v1/conversations/"+g+"/members", alice, map[string]any{"add": []string{"dave"}})
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+id+"/content", dave, nil)
	// Erin deletes the conversation's history for herself.
	n.ok(t, "DELETE", "/v1/conversations/"+g, erin, nil)
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+id+"/content", erin, nil)

	// Sends that name what they must not: a clear 400, nothing stored.
	other := n.upload(t, bob, []byte("bob's own file"))["id"].(string)
	partial := n.createUpload(t, alice, 10)
	for _, c := range []struct {
		what string
		id   any
	}{{"bob's upload", other}, {"an unfinished upload", partial}, {"an unknown id", unknown}, {"a malformed id", "../etc/passwd"}, {"no id", nil}} {
		fields := map[string]any{}
		if c.id != nil {
			fields["attachment_id"] = c.id
		}
		r := n.call(t, "POST", "/v1/messages", alice, map[string]any{"conv_id": g, "client_msg_id": "bad", "content_type": 3, "content": fields})
		checkErrorBody(t, "a send of "+c.what, r, http.StatusBadRequest)
	}
	if got := n.history(t, alice, g, seq); len(got) != 0 {
		t.Errorf("refused sends stored %d messages", len(got))
	}

	// Forwarded: the same attachment into another conversation, without a new upload.
	d := n.direct(t, alice, "carol")["conv_id"].(string)
	if r := n.sendAttachment(t, alice, d, "fwd", 2, id, nil); r.status != http.StatusOK {
		t.Fatalf("forward: %d %s", r.status, r.raw)
	}
	n.download(t, carol, id, "content", http.StatusOK, nil)

	// Recalled everywhere: nobody but alice sees it any more.
	n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": g, "seq": seq})
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+id+"/content", bob, nil)
	n.download(t, carol, id, "content", http.StatusOK, nil) // the forward stands
	n.download(t, alice, id, "content", http.StatusOK, nil)
}

// TestAttachmentUnsafeTypes: an uploaded SVG or HTML page is sniffed from its bytes (the
// client's type is ignored) and served so that it cannot run in the server's origin; an
// image on the allowlist is served inline.
func TestAttachmentUnsafeTypes(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.cookie)</script></svg>`)
	html := []byte(`<!DOCTYPE html><html><body><script>fetch('/v1/conversations')</script></body></html>`)
	for _, c := range []struct {
		name   string
		data   []byte
		inline bool
	}{{"svg", svg, false}, {"html", html, false}, {"png", pngImage(t, 8, 8), true}} {
		t.Run(c.name, func(t *testing.T) {
			id := n.createUpload(t, alice, int64(len(c.data)))
			n.patch(t, alice, id, 0, c.data)
			got := n.download(t, alice, id, "content", http.StatusOK, nil)
			h := got.header
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Security-Policy") != "sandbox" {
				t.Errorf("nosniff %q, CSP %q", h.Get("X-Content-Type-Options"), h.Get("Content-Security-Policy"))
			}
			disp := h.Get("Content-Disposition")
			if c.inline != strings.HasPrefix(disp, "inline") || !c.inline && !strings.HasPrefix(disp, "attachment") {
				t.Errorf("Content-Disposition %q (inline wanted: %v)", disp, c.inline)
			}
			if ct := h.Get("Content-Type"); !c.inline && (strings.Contains(ct, "html") || strings.Contains(ct, "svg")) && disp == "" {
				t.Errorf("Content-Type %q served without a disposition", ct)
			}
		})
	}
}

// bombPNG returns a valid PNG header declaring side×side pixels with a tiny body: a
// decompression bomb, since decoding it whole would take side² × 4 bytes.
func bombPNG(side uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(data)))
		c := crc32.NewIEEE()
		c.Write([]byte(typ))
		c.Write(data)
		b.WriteString(typ)
		b.Write(data)
		_ = binary.Write(&b, binary.BigEndian, c.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], side)
	binary.BigEndian.PutUint32(ihdr[4:], side)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write(make([]byte, 1<<20)) // the first rows of zeros: compresses to a kilobyte
	_ = zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return b.Bytes()
}

// TestAttachmentBomb: an image of 2.5 billion pixels is stored as a file without a
// thumbnail; the server never decodes it, and keeps serving.
func TestAttachmentBomb(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bomb := bombPNG(50_000)
	info := n.upload(t, alice, bomb)
	wantFields(t, "the bomb", info, map[string]any{"complete": true, "mime_type": "image/png", "thumbnail": false})
	if _, ok := info["preview"]; ok {
		t.Errorf("the bomb has a preview")
	}
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+info["id"].(string)+"/thumbnail", alice, nil)
	if got := n.download(t, alice, info["id"].(string), "content", http.StatusOK, nil); !bytes.Equal(got.raw, bomb) {
		t.Error("the bomb's bytes differ")
	}
	n.upload(t, alice, pngImage(t, 10, 10)) // still serving
}

// TestAttachmentSignedURL: a signed URL fetches without a bearer until it expires; it
// names one attachment and one form, and any change to it is the 404 of an unknown id.
func TestAttachmentSignedURL(t *testing.T) {
	var c clock
	n := start(t, withClock(&c))
	alice := n.user(t, "alice")
	img := pngImage(t, 400, 100)
	id := n.upload(t, alice, img)["id"].(string)
	other := n.upload(t, alice, []byte("another file"))["id"].(string)
	urls := n.ok(t, "POST", "/v1/attachments/"+id+"/urls", alice, map[string]any{"expires_in": 60})
	content, thumb := urls["content"].(string), urls["thumbnail"].(string)
	if exp := num(urls["expires_at"]); exp < c.now().Add(59*time.Second).UnixMilli() || exp > c.now().Add(61*time.Second).UnixMilli() {
		t.Errorf("expires_at %d, want in 60 s", exp)
	}
	get := func(u string) response {
		t.Helper()
		return n.call(t, "GET", u, "", nil)
	}
	if r := get(content); r.status != http.StatusOK || !bytes.Equal(r.raw, img) {
		t.Fatalf("signed content URL: %d", r.status)
	} else if cc := r.header.Get("Cache-Control"); !strings.Contains(cc, "public") {
		t.Errorf("signed URL Cache-Control %q, want public", cc)
	}
	if r := get(thumb); r.status != http.StatusOK {
		t.Fatalf("signed thumbnail URL: %d", r.status)
	}
	u, _ := url.Parse(content)
	q := u.Query()
	for name, bad := range map[string]string{
		"another id":        strings.Replace(content, id, other, 1),
		"the thumbnail":     strings.Replace(content, "/content", "/thumbnail", 1),
		"a later expiry":    u.Path + "?expires=" + strconv.FormatInt(c.now().Add(time.Hour).Unix(), 10) + "&sig=" + q.Get("sig"),
		"a forged sig":      u.Path + "?expires=" + q.Get("expires") + "&sig=" + strings.Repeat("A", len(q.Get("sig"))),
		"no sig":            u.Path + "?expires=" + q.Get("expires"),
		"no bearer nor sig": u.Path,
	} {
		unsigned := name == "no sig" || name == "no bearer nor sig" // a plain request without a token
		if r := get(bad); r.status != http.StatusNotFound && !(unsigned && r.status == http.StatusUnauthorized) {
			t.Errorf("%s: %d %s, want 404", name, r.status, r.raw)
		}
	}
	n.fail(t, http.StatusBadRequest, "POST", "/v1/attachments/"+id+"/urls", alice, map[string]any{"expires_in": 3601})
	n.fail(t, http.StatusNotFound, "POST", "/v1/attachments/"+id+"/urls", n.user(t, "mallory"), nil)
	c.advance(61 * time.Second)
	if r := get(content); r.status != http.StatusNotFound {
		t.Errorf("expired URL: %d, want 404", r.status)
	}
}

// TestAttachmentQuotaAndCollector: uploads count against the day's quota from their
// creation (429 past it); an upload never sent is collected after a day idle, bytes and
// row, and one that a message carries is kept.
func TestAttachmentQuotaAndCollector(t *testing.T) {
	var c clock
	n := start(t, withClock(&c), func(cfg *server.Config) { cfg.Chat.MaxUploadSize, cfg.Chat.UploadQuota = 1000, 2500 })
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	for _, c := range []struct {
		what string
		h    http.Header
		want int
	}{
		{"an upload over --max-upload-size", http.Header{"Upload-Length": {"1001"}}, http.StatusRequestEntityTooLarge},
		{"no Upload-Length", nil, http.StatusBadRequest},
		{"a malformed Upload-Length", http.Header{"Upload-Length": {"-3"}}, http.StatusBadRequest},
		{"a deferred length", http.Header{"Upload-Defer-Length": {"1"}}, http.StatusBadRequest},
	} {
		checkErrorBody(t, c.what, n.tus(t, "POST", "/v1/uploads", alice, nil, c.h), c.want)
	}
	kept := n.upload(t, alice, bytes.Repeat([]byte("k"), 1000))["id"].(string)
	idle := n.upload(t, alice, bytes.Repeat([]byte("i"), 1000))["id"].(string)
	r := n.tus(t, "POST", "/v1/uploads", alice, nil, http.Header{"Upload-Length": {"501"}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("an upload over the quota: %d %s, want 429", r.status, r.raw)
	}
	checkErrorBody(t, "over the quota", r, http.StatusTooManyRequests)
	n.createUpload(t, bob, 1000) // bob's quota is his own
	d := n.direct(t, alice, "bob")["conv_id"].(string)
	if r := n.sendAttachment(t, alice, d, "k", 3, kept, map[string]any{"name": "k.txt"}); r.status != http.StatusOK {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	if gone, err := n.Attachments.Collect(t.Context(), c.now()); err != nil || gone != 0 {
		t.Fatalf("collect before a day: %d, %v; want nothing collected", gone, err)
	}
	// Files a crash left behind after the completion of kept's upload: the next pass removes them.
	leftover := filepath.Join(n.Dir, server.UploadsDir, kept)
	if n.Config.UploadsDir != "" {
		leftover = filepath.Join(n.Config.UploadsDir, kept)
	}
	for _, p := range []string{leftover, leftover + ".info"} {
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(25 * time.Hour)
	if gone, err := n.Attachments.Collect(t.Context(), c.now()); err != nil || gone != 2 {
		t.Fatalf("collect after a day: %d, %v; want the idle upload and bob's unfinished one", gone, err)
	}
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+idle, alice, nil)
	for _, p := range []string{leftover, leftover + ".info"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the collector left %s: %v", p, err)
		}
	}
	n.fail(t, http.StatusNotFound, "GET", "/v1/attachments/"+idle+"/content", alice, nil)
	n.download(t, bob, kept, "content", http.StatusOK, nil)
	// A day later the quota is free again.
	n.createUpload(t, alice, 1000)
	n.createUpload(t, alice, 1000)
}
