package blobtest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/parleychat/parley/internal/blob"
)

// testHTTPRange serves a blob with http.ServeContent, as a download does, and checks that
// range requests answer exactly the bytes asked for.
func testHTTPRange(t *testing.T, s blob.Store) {
	const size = 1<<20 + 3
	data := genBytes(7, size)
	mustPut(t, s, "a/x", data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obj, err := s.Open(r.Context(), "a/x")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer obj.Close()
		http.ServeContent(w, r, "", obj.ModTime(), obj)
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		rng    string
		status int
		want   []byte
	}{
		{"", http.StatusOK, data},
		{"bytes=0-0", http.StatusPartialContent, data[:1]},
		{"bytes=100-199", http.StatusPartialContent, data[100:200]},
		{"bytes=524288-", http.StatusPartialContent, data[524288:]},
		{"bytes=-50", http.StatusPartialContent, data[size-50:]},
		{"bytes=1000-99999999", http.StatusPartialContent, data[1000:]},
		{"bytes=99999999-", http.StatusRequestedRangeNotSatisfiable, nil},
	} {
		t.Run(tt.rng, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.rng != "" {
				req.Header.Set("Range", tt.rng)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.want != nil && !bytes.Equal(body, tt.want) {
				t.Errorf("body of %d bytes differs from the %d bytes asked for", len(body), len(tt.want))
			}
		})
	}
}
