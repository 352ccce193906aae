package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/parleychat/parley/protocol"
)

// Admin makes the operator calls of section 3 with the server's admin secret. Tests and the
// load tool use it to create users and mint their tokens. Safe for concurrent use.
type Admin struct {
	http transport
}

// NewAdmin returns an Admin for the server at baseURL. hc may be nil (a new http.Client).
func NewAdmin(baseURL, secret string, hc *http.Client) *Admin {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Admin{http: transport{base: strings.TrimRight(baseURL, "/"), secret: secret, hc: hc}}
}

// CreateUser creates userID (name may be empty). created is false when the user already
// existed; the existing user is then returned, so the call is safe to repeat.
func (a *Admin) CreateUser(ctx context.Context, userID, name string) (u User, created bool, err error) {
	req := protocol.CreateUserRequest{UserID: userID, Name: name}
	status, err := a.http.do(ctx, http.MethodPost, "/v1/admin/users", nil, req, &u)
	return u, status == http.StatusCreated, err
}

// IssueToken mints a token binding userID and deviceID. ttl 0 means the server's default (30
// days); it is rounded down to whole seconds. 404: unknown user.
func (a *Admin) IssueToken(ctx context.Context, userID, deviceID string, ttl time.Duration) (Token, error) {
	var out Token
	req := protocol.TokenRequest{UserID: userID, DeviceID: deviceID, TTLSeconds: int64(ttl / time.Second)}
	_, err := a.http.do(ctx, http.MethodPost, "/v1/admin/tokens", nil, req, &out)
	return out, err
}

// RevokeUser invalidates every token of userID issued before the call and closes the user's
// WebSockets; tokens minted afterwards work.
func (a *Admin) RevokeUser(ctx context.Context, userID string) error {
	path := "/v1/admin/users/" + url.PathEscape(userID) + "/revoke"
	_, err := a.http.do(ctx, http.MethodPost, path, nil, nil, nil)
	return err
}
