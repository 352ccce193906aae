package pushtest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FCM is a fake of Firebase Cloud Messaging's HTTP v1 API and of Google's OAuth2 token
// endpoint, over HTTP/2 TLS.
//
// POST /token mints an access token for a JWT-bearer assertion signed (RS256) by Account's
// key, with kid Account.KeyID, iss Account.ClientEmail, aud Account.TokenURI, the
// firebase.messaging scope and a live exp. POST /v1/projects/{Account.ProjectID}/messages:send
// accepts a message when Authorization is "Bearer" and a token it minted, and the body is a
// data-only v1 message: {"message": {"token", "data" with a push_id, "android": {priority
// HIGH or NORMAL, ttl "Ns"}}} and no "notification" block. It answers as FCM does otherwise
// (401 UNAUTHENTICATED, 400 INVALID_ARGUMENT, 403 SENDER_ID_MISMATCH).
//
// All its methods are safe for concurrent use.
type FCM struct {
	Account ServiceAccount // its key file, for fcm.Options.CredentialsFile

	fakeService[FCMMessage, FCMReply]
	issued sync.Map // access token -> struct{}
	mints  atomic.Int64
}

// FCMMessage is one message the fake accepted, as decoded from its body.
type FCMMessage struct {
	Token   string            `json:"token"`
	Data    map[string]string `json:"data"`
	Android struct {
		CollapseKey string `json:"collapse_key"`
		Priority    string `json:"priority"`
		TTL         string `json:"ttl"`
	} `json:"android"`
	APNs struct {
		Headers map[string]string `json:"headers"`
	} `json:"apns"`
	// Notification is the display block, which Parley never sends; the fake refuses a
	// message that has one.
	Notification json.RawMessage `json:"notification,omitempty"`
}

// FCMReply is a scripted answer of the fake FCM.
type FCMReply struct {
	Status      int
	ErrorStatus string // the error's "status" (UNAVAILABLE, NOT_FOUND, …); from Status when ""
	ErrorCode   string // the FcmError detail's errorCode (UNREGISTERED, …); "" for none
	RetryAfter  string // the Retry-After header, verbatim; "" for none
	// Times is how many requests this reply answers before it is spent; 0 means all of
	// them, until Reset.
	Times int
}

// FCMProjectID is the project of the fake's service account.
const FCMProjectID = "parley-test"

// NewFCM starts a fake FCM and writes a service account (WriteServiceAccount) whose
// token_uri is the fake's /token; tb's cleanup stops it.
func NewFCM(tb testing.TB) *FCM {
	tb.Helper()
	f := &FCM{}
	mux := http.NewServeMux()
	mux.HandleFunc("/token", f.serveToken)
	mux.HandleFunc("/", f.serveSend)
	f.srv = startFakeTLS(tb, mux)
	f.Account = WriteServiceAccount(tb, FCMProjectID, f.srv.URL+"/token")
	return f
}

// CredentialsFile is the path of the service account JSON the fake trusts.
func (f *FCM) CredentialsFile() string { return f.Account.Path }

// Mints is the number of access tokens minted: 1 for a provider that caches its token.
func (f *FCM) Mints() int { return int(f.mints.Load()) }

// Messages returns a copy of every accepted message, repeats included, in the order
// accepted.
func (f *FCM) Messages() []FCMMessage { return f.tally.list() }

// Reply scripts the answer to messages for registration token regToken, or for every token
// when regToken is "". Replies queue up as APNs.Reply's do.
func (f *FCM) Reply(regToken string, r FCMReply) { f.replies.add(regToken, r, r.Times) }

// Throttle answers the next k messages for regToken ("" for all) with status (429, 500 or
// 503) and a Retry-After of retryAfter in seconds (none when zero).
func (f *FCM) Throttle(regToken string, status, k int, retryAfter time.Duration) {
	r := FCMReply{Status: status, Times: k}
	if status == http.StatusTooManyRequests {
		r.ErrorCode = "QUOTA_EXCEEDED"
	}
	if retryAfter > 0 {
		r.RetryAfter = strconv.Itoa(int(retryAfter / time.Second))
	}
	f.Reply(regToken, r)
}

// Unregister makes regToken dead: every message for it gets 404 NOT_FOUND with errorCode
// UNREGISTERED, as FCM answers for an uninstalled app.
func (f *FCM) Unregister(regToken string) {
	f.Reply(regToken, FCMReply{Status: http.StatusNotFound, ErrorCode: "UNREGISTERED"})
}

// fcmStatuses are the Google API error statuses of the HTTP statuses FCM answers with.
var fcmStatuses = map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
	404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

func writeFCMError(w http.ResponseWriter, r FCMReply, message string) {
	status := r.ErrorStatus
	if status == "" {
		status = fcmStatuses[r.Status]
	}
	e := map[string]any{"code": r.Status, "message": message, "status": status}
	if r.ErrorCode != "" {
		e["details"] = []map[string]string{{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
			"errorCode": r.ErrorCode}}
	}
	if r.RetryAfter != "" {
		w.Header().Set("Retry-After", r.RetryAfter)
	}
	writeFakeJSON(w, r.Status, map[string]any{"error": e})
}

func (f *FCM) serveSend(w http.ResponseWriter, r *http.Request) {
	f.tally.request()
	if f.replies.isDown() {
		writeFCMError(w, FCMReply{Status: http.StatusServiceUnavailable}, "The service is currently unavailable.")
		return
	}
	m, fail, why := f.checkSend(r)
	if fail.Status != 0 {
		writeFCMError(w, fail, why)
		return
	}
	if reply, ok := f.replies.next(m.Token); ok && reply.Status != http.StatusOK {
		writeFCMError(w, reply, "scripted")
		return
	}
	f.tally.accept(m.Data["push_id"], m)
	writeFakeJSON(w, http.StatusOK, map[string]string{
		"name": "projects/" + f.Account.ProjectID + "/messages/" + m.Data["push_id"]})
}

// fcmTTL is the form of a google.protobuf.Duration in JSON.
var fcmTTL = regexp.MustCompile(`^\d+(\.\d{1,9})?s$`)

// checkSend validates one messages:send request as FCM would.
func (f *FCM) checkSend(r *http.Request) (FCMMessage, FCMReply, string) {
	bad := func(status int, code, why string) (FCMMessage, FCMReply, string) {
		return FCMMessage{}, FCMReply{Status: status, ErrorCode: code}, why
	}
	project, ok := strings.CutPrefix(r.URL.Path, "/v1/projects/")
	project, ok2 := strings.CutSuffix(project, "/messages:send")
	if !ok || !ok2 || r.Method != http.MethodPost {
		return bad(http.StatusNotFound, "", "no such method: "+r.Method+" "+r.URL.Path)
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if _, minted := f.issued.Load(tok); !ok || !minted {
		return bad(http.StatusUnauthorized, "", "Request had invalid authentication credentials.")
	}
	if project != f.Account.ProjectID {
		return bad(http.StatusForbidden, "SENDER_ID_MISMATCH", "SenderId mismatch")
	}
	var body struct {
		Message *FCMMessage `json:"message"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Message == nil {
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid JSON payload: %v", err))
	}
	m := *body.Message
	switch {
	case m.Token == "":
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", "message.token is required")
	case m.Data["push_id"] == "":
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", "data.push_id is required (by the fake)")
	case len(m.Notification) > 0:
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", "a notification block (the fake expects data-only)")
	case m.Android.Priority != "HIGH" && m.Android.Priority != "NORMAL":
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", "android.priority must be HIGH or NORMAL")
	case m.Android.TTL != "" && !fcmTTL.MatchString(m.Android.TTL):
		return bad(http.StatusBadRequest, "INVALID_ARGUMENT", "android.ttl is not a duration")
	}
	return m, FCMReply{}, ""
}

// serveToken is Google's OAuth2 token endpoint for the JWT-bearer grant (RFC 7523).
func (f *FCM) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost ||
		r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		writeFakeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	if err := f.verifyAssertion(r.PostForm.Get("assertion")); err != nil {
		writeFakeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant",
			"error_description": err.Error()})
		return
	}
	tok := "ya29.fake-" + rand.Text()
	f.issued.Store(tok, struct{}{})
	f.mints.Add(1)
	writeFakeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3599})
}

// verifyAssertion checks a service account's signed JWT as Google's token endpoint does.
func (f *FCM) verifyAssertion(assertion string) error {
	claims := struct {
		jwt.RegisteredClaims
		Scope string `json:"scope"`
	}{}
	_, err := jwt.ParseWithClaims(assertion, &claims, func(t *jwt.Token) (any, error) {
		if t.Header["kid"] != f.Account.KeyID {
			return nil, fmt.Errorf("kid %v, want %s", t.Header["kid"], f.Account.KeyID)
		}
		return &f.Account.Private.PublicKey, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(f.Account.ClientEmail),
		jwt.WithAudience(f.Account.TokenURI), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithLeeway(time.Minute))
	if err != nil {
		return err
	}
	for _, s := range strings.Fields(claims.Scope) {
		if s == "https://www.googleapis.com/auth/firebase.messaging" {
			return nil
		}
	}
	return fmt.Errorf("scope %q lacks firebase.messaging", claims.Scope)
}
