package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

// TestReferencesResolve checks that every file the page loads (src/href in index.html, ES
// module imports in the scripts) is embedded, so the client works offline from the binary.
func TestReferencesResolve(t *testing.T) {
	root := Files()
	page, err := fs.ReadFile(root, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	attr := regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`)
	for _, m := range attr.FindAllStringSubmatch(string(page), -1) {
		if _, err := fs.Stat(root, strings.TrimPrefix(m[1], "/static/")); err != nil {
			t.Errorf("index.html references %s, which is not embedded", m[1])
		}
	}
	imports := regexp.MustCompile(`(?m)^\s*import\s[^'"]*['"]([^'"]+)['"]`)
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		src, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		for _, m := range imports.FindAllStringSubmatch(string(src), -1) {
			if !strings.HasPrefix(m[1], "./") && !strings.HasPrefix(m[1], "../") {
				t.Errorf("%s imports %q: only relative imports of embedded files are served", p, m[1])
				continue
			}
			if _, err := fs.Stat(root, path.Join(path.Dir(p), m[1])); err != nil {
				t.Errorf("%s imports %s, which is not embedded", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoNetworkAtRunTime checks that no embedded file loads anything from another host (no
// CDN): the only absolute URL allowed is the SVG namespace, which is a name, not a fetch.
func TestNoNetworkAtRunTime(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Files(), p)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s mentions %s: the client must not load anything from another host", p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/static/sdk/parley.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/static/icon.svg", 200, "image/svg+xml"},
		{"GET", "/sw.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/static/push.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/static/vendor/tus.min.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/static/vendor/tus-js-client.LICENSE", 200, "text/plain; charset=utf-8"},
		{"GET", "/app.js", 404, "application/json"},
		{"GET", "/static/index.html", 404, "application/json"},
		{"GET", "/static/../web.go", 404, "application/json"},
		{"GET", "/static/sdk/", 404, "application/json"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != tc.ctype {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.status, tc.ctype)
		}
		if rec.Code == http.StatusOK && rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: no nosniff header", tc.method, tc.path)
		}
	}
}
