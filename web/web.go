// Package web is Parley's browser client: a page, a stylesheet and plain ES modules (the
// reference JavaScript SDK in static/sdk/parley.js and the page's app.js), embedded in the
// binary and served as they are. There is no build step and nothing is fetched from another
// host at run time. The gateway mounts Handler at "/" (the page), "/sw.js" (the service
// worker) and "/static/" (its files).
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed static/*.html static/*.css static/*.js static/*.svg static/sdk/*.js static/vendor/*
var files embed.FS

// Files returns the client's files, rooted at the static folder ("index.html",
// "sdk/parley.js", ...).
func Files() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the folder is embedded above: cannot happen
	}
	return sub
}

// ContentSecurityPolicy is sent with every file: the page loads scripts, styles and
// connections only from the server that served it (connect-src 'self' covers the same
// host's WebSocket, and the vendored tus client's uploads). Images may also be data: URLs:
// an attachment's preview, a tiny JPEG the server puts in the message itself.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// asset is one file, ready to serve.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

var loadAssets = sync.OnceValue(func() map[string]asset {
	out := make(map[string]asset)
	root := Files()
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // do not depend on the system's MIME tables for what matters
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".html":
			ctype = "text/html; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		case ".LICENSE":
			ctype = "text/plain; charset=utf-8"
		}
		out[p] = asset{body: b, ctype: ctype, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // embedded files always read
	}
	return out
})

// Handler serves the client: "/" is index.html, "/sw.js" the service worker that shows Web
// Push notifications (served from the root so that its scope is "/"), and "/static/<name>"
// the other files. Files
// are revalidated on every load (Cache-Control: no-cache with a content ETag), so a new
// binary's client is picked up at once. Unknown files are a JSON 404 like the API's.
func Handler() http.Handler {
	assets := loadAssets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var name string
		switch r.URL.Path {
		case "/":
			name = "index.html"
		case "/sw.js":
			name = "sw.js" // at the root, so that its scope is the whole app
		default:
			name = strings.TrimPrefix(r.URL.Path, "/static/")
		}
		a, ok := assets[name]
		if !ok || name == "index.html" && r.URL.Path != "/" {
			notFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

func notFound(w http.ResponseWriter, r *http.Request) {
	b, _ := json.Marshal(struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}{http.StatusNotFound, "no such file: " + r.URL.Path})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(append(b, '\n'))
}
