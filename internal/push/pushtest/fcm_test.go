package pushtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fcmAssertion signs a JWT-bearer assertion with sa's key, as oauth2/google does.
func fcmAssertion(t *testing.T, sa ServiceAccount, aud, scope string) string {
	t.Helper()
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": sa.ClientEmail, "aud": aud,
		"scope": scope, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	tok.Header["kid"] = sa.KeyID
	s, err := tok.SignedString(sa.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fcmMint asks the fake for an access token; it returns "" when refused.
func fcmMint(t *testing.T, f *FCM, assertion string) string {
	t.Helper()
	resp, err := f.Client().PostForm(f.Account.TokenURI, url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return body.AccessToken
}

func TestFCMTokenEndpoint(t *testing.T) {
	f := NewFCM(t)
	const scope = "https://www.googleapis.com/auth/firebase.messaging"
	if fcmMint(t, f, fcmAssertion(t, f.Account, f.Account.TokenURI, scope)) == "" {
		t.Error("a good assertion was refused")
	}
	other := WriteServiceAccount(t, f.Account.ProjectID, f.Account.TokenURI)
	other.KeyID = f.Account.KeyID
	for name, a := range map[string]string{
		"foreign key":  fcmAssertion(t, other, f.Account.TokenURI, scope),
		"wrong aud":    fcmAssertion(t, f.Account, "https://elsewhere/token", scope),
		"wrong scope":  fcmAssertion(t, f.Account, f.Account.TokenURI, "https://www.googleapis.com/auth/cloud-platform.read-only"),
		"not a jwt":    "nope",
		"no assertion": "",
	} {
		if tok := fcmMint(t, f, a); tok != "" {
			t.Errorf("%s: minted %q", name, tok)
		}
	}
	if f.Mints() != 1 {
		t.Errorf("mints %d, want 1", f.Mints())
	}
}

func TestFCMSendChecks(t *testing.T) {
	f := NewFCM(t)
	tok := fcmMint(t, f, fcmAssertion(t, f.Account, f.Account.TokenURI,
		"https://www.googleapis.com/auth/firebase.messaging"))
	sendURL := f.URL() + "/v1/projects/" + f.Account.ProjectID + "/messages:send"
	const good = `{"message":{"token":"t1","data":{"push_id":"p1"},"android":{"priority":"HIGH","ttl":"60s"}}}`
	tests := []struct {
		name, url, bearer, body string
		wantStatus              int
		wantStatusText          string
	}{
		{"accepted", sendURL, tok, good, 200, ""},
		{"no bearer", sendURL, "", good, 401, "UNAUTHENTICATED"},
		{"unknown bearer", sendURL, "ya29.made-up", good, 401, "UNAUTHENTICATED"},
		{"other project", f.URL() + "/v1/projects/other/messages:send", tok, good, 403, "PERMISSION_DENIED"},
		{"bad path", f.URL() + "/v1/messages", tok, good, 404, "NOT_FOUND"},
		{"not json", sendURL, tok, "{", 400, "INVALID_ARGUMENT"},
		{"no token", sendURL, tok, `{"message":{"data":{"push_id":"p1"},"android":{"priority":"HIGH"}}}`, 400, "INVALID_ARGUMENT"},
		{"no push_id", sendURL, tok, `{"message":{"token":"t1","data":{},"android":{"priority":"HIGH"}}}`, 400, "INVALID_ARGUMENT"},
		{"non-string data", sendURL, tok, `{"message":{"token":"t1","data":{"push_id":1},"android":{"priority":"HIGH"}}}`, 400, "INVALID_ARGUMENT"},
		{"notification", sendURL, tok, `{"message":{"token":"t1","data":{"push_id":"p1"},"notification":{"title":"x"},"android":{"priority":"HIGH"}}}`, 400, "INVALID_ARGUMENT"},
		{"bad priority", sendURL, tok, `{"message":{"token":"t1","data":{"push_id":"p1"},"android":{"priority":"URGENT"}}}`, 400, "INVALID_ARGUMENT"},
		{"bad ttl", sendURL, tok, `{"message":{"token":"t1","data":{"push_id":"p1"},"android":{"priority":"HIGH","ttl":"1h"}}}`, 400, "INVALID_ARGUMENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, tt.url, strings.NewReader(tt.body))
			if tt.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tt.bearer)
			}
			resp, err := f.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb struct{ Error struct{ Status string } }
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			if resp.StatusCode != tt.wantStatus || eb.Error.Status != tt.wantStatusText {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, eb.Error.Status, tt.wantStatus, tt.wantStatusText)
			}
		})
	}
	if f.Count() != 1 || f.Messages()[0].Android.TTL != "60s" {
		t.Errorf("count %d, messages %+v", f.Count(), f.Messages())
	}
}
