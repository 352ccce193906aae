package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// transport performs one JSON request against the HTTP API. Client and Admin share it; they
// differ only in the bearer secret (a device token or the admin secret).
type transport struct {
	base   string // scheme://host[/prefix], no trailing slash
	secret string
	hc     *http.Client
}

// do sends in (if non-nil) as JSON to method base+path?query and decodes a 2xx answer into
// out (if non-nil). It returns the HTTP status; a non-2xx answer is an *Error, a transport
// failure the underlying error.
func (t *transport) do(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("parley: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(data)
	}
	u := t.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("parley: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+t.secret)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Drain what is left so the connection returns to the pool.
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, errorFromResponse(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("parley: decode %s %s answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// convPath is /v1/conversations/{id}[/suffix] with the id escaped: ids come from the server
// but the client must never let one rewrite the path.
func convPath(convID, suffix string) string {
	return "/v1/conversations/" + url.PathEscape(convID) + suffix
}
