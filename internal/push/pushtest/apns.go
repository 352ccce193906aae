// Package pushtest holds fakes of the push services (APNs, FCM, Web Push) that the providers
// in internal/push talk to in tests, over real sockets: each fake is an httptest TLS server
// that checks what the real service checks (credentials, headers, body shape), records what it
// accepted, counts it by notification id so that a repeat shows, and can be scripted to
// answer as the real service does when it throttles, is down, or finds a token dead.
//
// The fakes answer fast and in parallel, so that a benchmark can push thousands of
// notifications a second through them. Tests wait for a count with WaitCount, never by
// sleeping.
package pushtest

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNs is a fake of Apple's provider API (HTTP/2 over TLS, token authentication). It accepts
// POST /3/device/{hex token} when the bearer JWT is an ES256 token signed by Key with kid
// Key.KeyID, iss Key.TeamID and an iat less than an hour old, and the headers are sound:
// apns-topic present, apns-id a UUID (required here, though Apple makes one up when it is
// missing, because the fake counts by it), apns-push-type known, apns-priority 1, 5 or 10,
// apns-expiration a number, and a JSON payload with an "aps" object of at most 4 KiB. It
// answers as APNs does otherwise (403 InvalidProviderToken, 400 MissingTopic, …).
//
// All its methods are safe for concurrent use.
type APNs struct {
	Key APNsKey // the key it trusts; Options of internal/push/apns take its Path and ids

	fakeService[APNsNotification, APNsReply]
	verified sync.Map     // bearer string -> time.Time iat, for tokens whose signature checked out
	tokens   atomic.Int64 // distinct provider tokens verified
}

// APNsNotification is one notification the fake accepted.
type APNsNotification struct {
	DeviceToken string      // from the path
	Header      http.Header // the request's headers, Authorization left out
	ID          string      // apns-id
	Topic       string      // apns-topic
	CollapseID  string      // apns-collapse-id
	PushType    string      // apns-push-type
	Priority    int         // apns-priority, 10 when absent
	Expiration  int64       // apns-expiration, 0 when absent
	Payload     map[string]any
}

// APS returns the payload's "aps" dictionary.
func (n APNsNotification) APS() map[string]any {
	m, _ := n.Payload["aps"].(map[string]any)
	return m
}

// APNsReply is a scripted answer of the fake APNs.
type APNsReply struct {
	Status     int
	Reason     string    // the JSON "reason"
	RetryAfter string    // the Retry-After header, verbatim ("30" or an HTTP date); "" for none
	Timestamp  time.Time // the JSON "timestamp" of a 410, in ms; zero for none
	// Times is how many requests this reply answers before it is spent; 0 means all of
	// them, until Reset.
	Times int
}

// NewAPNs starts a fake APNs trusting a fresh key (NewAPNsKey); tb's cleanup stops it.
func NewAPNs(tb testing.TB) *APNs {
	tb.Helper()
	return NewAPNsWithKey(tb, NewAPNsKey(tb))
}

// NewAPNsWithKey starts a fake APNs trusting key; tb's cleanup stops it.
func NewAPNsWithKey(tb testing.TB, key APNsKey) *APNs {
	tb.Helper()
	f := &APNs{Key: key}
	f.srv = startFakeTLS(tb, http.HandlerFunc(f.serve))
	return f
}

// Tokens is the number of distinct provider JWTs that verified: 1 for a provider that
// caches its token as it should.
func (f *APNs) Tokens() int { return int(f.tokens.Load()) }

// Notifications returns a copy of every accepted notification, repeats included, in the
// order accepted.
func (f *APNs) Notifications() []APNsNotification { return f.tally.list() }

// Reply scripts the answer to requests for deviceToken, or for every token when deviceToken
// is "". Replies queue up: each request that passes the checks takes the first unspent one,
// a token's own before the global ones, and is accepted when none is left. A reply of
// status 200 accepts the request: it exempts a token from a global script.
func (f *APNs) Reply(deviceToken string, r APNsReply) { f.replies.add(deviceToken, r, r.Times) }

// Throttle answers the next k requests for deviceToken ("" for all) with status (429 or 503,
// or 500) and a Retry-After of retryAfter in seconds (none when zero).
func (f *APNs) Throttle(deviceToken string, status, k int, retryAfter time.Duration) {
	reason := map[int]string{http.StatusTooManyRequests: "TooManyRequests",
		http.StatusServiceUnavailable: "ServiceUnavailable"}[status]
	if reason == "" {
		reason = "InternalServerError"
	}
	r := APNsReply{Status: status, Reason: reason, Times: k}
	if retryAfter > 0 {
		r.RetryAfter = strconv.Itoa(int(retryAfter / time.Second))
	}
	f.Reply(deviceToken, r)
}

// Unregister makes deviceToken dead since the given time: every request for it gets 410
// Unregistered with that timestamp.
func (f *APNs) Unregister(deviceToken string, since time.Time) {
	f.Reply(deviceToken, APNsReply{Status: http.StatusGone, Reason: "Unregistered", Timestamp: since})
}

// BadDeviceToken makes every request for deviceToken get 400 BadDeviceToken.
func (f *APNs) BadDeviceToken(deviceToken string) {
	f.Reply(deviceToken, APNsReply{Status: http.StatusBadRequest, Reason: "BadDeviceToken"})
}

func (f *APNs) serve(w http.ResponseWriter, r *http.Request) {
	f.tally.request()
	if f.replies.isDown() {
		writeAPNsError(w, APNsReply{Status: http.StatusServiceUnavailable, Reason: "ServiceUnavailable"})
		return
	}
	n, fail := f.check(r)
	if fail.Status != 0 {
		writeAPNsError(w, fail)
		return
	}
	if reply, ok := f.replies.next(n.DeviceToken); ok && reply.Status != http.StatusOK {
		writeAPNsError(w, reply)
		return
	}
	f.tally.accept(n.ID, n)
	w.Header().Set("apns-id", n.ID)
	w.WriteHeader(http.StatusOK)
}

// check validates one request as APNs would, returning the notification or the error reply.
func (f *APNs) check(r *http.Request) (APNsNotification, APNsReply) {
	bad := func(status int, reason string) (APNsNotification, APNsReply) {
		return APNsNotification{}, APNsReply{Status: status, Reason: reason}
	}
	if r.ProtoMajor != 2 {
		return bad(http.StatusBadRequest, "BadProtocol (HTTP/2 required)")
	}
	if r.Method != http.MethodPost {
		return bad(http.StatusMethodNotAllowed, "MethodNotAllowed")
	}
	tok, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	if !ok {
		return bad(http.StatusNotFound, "BadPath")
	}
	if !isHexString(tok) {
		return bad(http.StatusBadRequest, "BadDeviceToken")
	}
	if reason := f.checkBearer(r.Header.Get("Authorization")); reason != "" {
		return bad(http.StatusForbidden, reason)
	}
	h := r.Header.Clone()
	h.Del("Authorization")
	n := APNsNotification{DeviceToken: tok, Header: h, ID: h.Get("apns-id"), Topic: h.Get("apns-topic"),
		CollapseID: h.Get("apns-collapse-id"), PushType: h.Get("apns-push-type"), Priority: 10}
	switch {
	case n.Topic == "":
		return bad(http.StatusBadRequest, "MissingTopic")
	case !isAPNsID(n.ID):
		return bad(http.StatusBadRequest, "BadMessageId")
	case !apnsPushTypes[n.PushType]:
		return bad(http.StatusBadRequest, "InvalidPushType")
	case len(n.CollapseID) > 64:
		return bad(http.StatusBadRequest, "BadCollapseId")
	}
	if p := h.Get("apns-priority"); p != "" {
		if n.Priority, _ = strconv.Atoi(p); n.Priority != 1 && n.Priority != 5 && n.Priority != 10 {
			return bad(http.StatusBadRequest, "BadPriority")
		}
	}
	if e := h.Get("apns-expiration"); e != "" {
		var err error
		if n.Expiration, err = strconv.ParseInt(e, 10, 64); err != nil {
			return bad(http.StatusBadRequest, "BadExpirationDate")
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	switch {
	case err != nil || len(body) == 0:
		return bad(http.StatusBadRequest, "PayloadEmpty")
	case len(body) > 4096:
		return bad(http.StatusRequestEntityTooLarge, "PayloadTooLarge")
	case json.Unmarshal(body, &n.Payload) != nil:
		return bad(http.StatusBadRequest, "BadPayload (not a JSON object)")
	case n.APS() == nil:
		return bad(http.StatusBadRequest, "BadPayload (no aps dictionary)")
	}
	return n, APNsReply{}
}

// apnsPushTypes are the apns-push-type values APNs knows.
var apnsPushTypes = map[string]bool{"alert": true, "background": true, "location": true, "voip": true,
	"complication": true, "fileprovider": true, "mdm": true, "liveactivity": true, "pushtotalk": true}

// checkBearer returns "" for a valid provider token, or APNs's reason for refusing it. A
// token's signature is checked once; its age on every request, as APNs does.
func (f *APNs) checkBearer(header string) string {
	tok, ok := strings.CutPrefix(header, "bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(header, "Bearer ")
	}
	if !ok || tok == "" {
		return "MissingProviderToken"
	}
	iat, seen := f.verified.Load(tok)
	if !seen {
		var err error
		if iat, err = f.verify(tok); err != nil {
			return "InvalidProviderToken"
		}
		if _, dup := f.verified.LoadOrStore(tok, iat); !dup {
			f.tokens.Add(1)
		}
	}
	if time.Since(iat.(time.Time)) > time.Hour {
		return "ExpiredProviderToken"
	}
	return ""
}

// verify checks a provider token's signature, kid, iss and iat, and returns its iat.
func (f *APNs) verify(tok string) (time.Time, error) {
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		if t.Header["kid"] != f.Key.KeyID {
			return nil, fmt.Errorf("kid %v, want %s", t.Header["kid"], f.Key.KeyID)
		}
		return f.Key.Private.Public().(*ecdsa.PublicKey), nil
	}, jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuer(f.Key.TeamID), jwt.WithIssuedAt(),
		jwt.WithLeeway(time.Minute))
	if err != nil {
		return time.Time{}, err
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil {
		return time.Time{}, fmt.Errorf("no iat")
	}
	return iat.Time, nil
}

func writeAPNsError(w http.ResponseWriter, r APNsReply) {
	body := map[string]any{"reason": r.Reason}
	if !r.Timestamp.IsZero() {
		body["timestamp"] = r.Timestamp.UnixMilli()
	}
	if r.RetryAfter != "" {
		w.Header().Set("Retry-After", r.RetryAfter)
	}
	writeFakeJSON(w, r.Status, body)
}

func isHexString(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isAPNsID reports whether s has the 8-4-4-4-12 hex form APNs requires of an apns-id.
func isAPNsID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, part := range strings.Split(s, "-") {
		if len(part) != []int{8, 4, 4, 4, 12}[i] || !isHexString(part) {
			return false
		}
		if i == 4 {
			return true
		}
	}
	return false
}

// The rest of this file is shared by the fakes of this package.

// fakeService is what the fakes share: the TLS server, the tally of what was accepted, and the
// scripted replies. Each fake embeds it, so that its methods are the fake's.
type fakeService[N, R any] struct {
	srv     *httptest.Server
	tally   idTally[N]
	replies replyScript[R]
}

// URL is the fake's base URL, for the provider's Options.Endpoint.
func (s *fakeService[N, R]) URL() string { return s.srv.URL }

// Client returns an HTTP/2 client that trusts the fake's certificate, for the provider's
// Options.HTTPClient.
func (s *fakeService[N, R]) Client() *http.Client { return s.srv.Client() }

// Count is the number of distinct notification ids accepted (apns-id, FCM's data.push_id).
func (s *fakeService[N, R]) Count() int { return s.tally.count() }

// Repeats is the number of accepted notifications whose id had been accepted before.
func (s *fakeService[N, R]) Repeats() int { return s.tally.repeats() }

// Requests is the number of notification requests answered, whatever the answer.
func (s *fakeService[N, R]) Requests() int { return s.tally.requestCount() }

// WaitCount waits until Count reaches n, or returns an error when ctx ends first.
func (s *fakeService[N, R]) WaitCount(ctx context.Context, n int) error { return s.tally.wait(ctx, n) }

// WaitRequests waits until the fake got n notification requests, whatever it answered.
func (s *fakeService[N, R]) WaitRequests(ctx context.Context, n int) error {
	return s.tally.waitRequests(ctx, n)
}

// SetDown switches the outage on or off: while it is on, every notification request gets a
// 503, before any check.
func (s *fakeService[N, R]) SetDown(down bool) { s.replies.setDown(down) }

// Reset drops every scripted reply and ends an outage; what was accepted stays counted.
func (s *fakeService[N, R]) Reset() { s.replies.reset() }

// startFakeTLS starts an HTTP/2 TLS server for a fake, stopped by tb's cleanup. It allows many
// concurrent streams per connection so that a benchmark's burst is not queued behind
// Go's default of 250.
func startFakeTLS(tb testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	return srv
}

func writeFakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client hung up: nothing to do
}

// idTally records what a fake accepted and counts it by notification id, so that a repeat of
// the same id (a retry the pusher should not have made, or a crash recovery that resends)
// counts once and shows in repeats.
type idTally[N any] struct {
	mu       sync.Mutex // guards the fields below
	notes    []N
	seen     map[string]int // id -> times accepted
	requests int
	changed  chan struct{} // closed and replaced at every request and accept, to wake waiters
}

func (t *idTally[N]) request() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	t.notifyLocked()
}

func (t *idTally[N]) notifyLocked() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

func (t *idTally[N]) accept(id string, n N) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = make(map[string]int)
	}
	t.notes = append(t.notes, n)
	t.seen[id]++
	t.notifyLocked()
}

func (t *idTally[N]) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen)
}

func (t *idTally[N]) repeats() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.notes) - len(t.seen)
}

func (t *idTally[N]) requestCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

func (t *idTally[N]) list() []N {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]N(nil), t.notes...)
}

// wait blocks until n distinct ids were accepted or ctx ends.
func (t *idTally[N]) wait(ctx context.Context, n int) error {
	return t.waitUntil(ctx, n, "notifications accepted", func() int { return len(t.seen) })
}

// waitRequests blocks until n requests came (accepted or not) or ctx ends.
func (t *idTally[N]) waitRequests(ctx context.Context, n int) error {
	return t.waitUntil(ctx, n, "requests", func() int { return t.requests })
}

// waitUntil blocks until count (called with t.mu held) is at least n or ctx ends.
func (t *idTally[N]) waitUntil(ctx context.Context, n int, what string, count func() int) error {
	for {
		t.mu.Lock()
		got := count()
		if got >= n {
			t.mu.Unlock()
			return nil
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("pushtest: %d of %d %s: %w", got, n, what, ctx.Err())
		}
	}
}

// replyScript holds a fake's scripted answers: an outage switch, and queues of replies per
// device token and for every token.
type replyScript[R any] struct {
	mu      sync.Mutex // guards the fields below
	down    bool
	byToken map[string][]*scriptedReply[R] // "" holds the replies for every token
}

type scriptedReply[R any] struct {
	reply R
	left  int // requests it still answers; -1 for all of them
}

func (s *replyScript[R]) add(token string, r R, times int) {
	if times <= 0 {
		times = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byToken == nil {
		s.byToken = make(map[string][]*scriptedReply[R])
	}
	s.byToken[token] = append(s.byToken[token], &scriptedReply[R]{reply: r, left: times})
}

// next takes the reply for a request to token, if any is scripted.
func (s *replyScript[R]) next(token string) (R, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range []string{token, ""} {
		q := s.byToken[key]
		if len(q) == 0 {
			continue
		}
		r := q[0].reply
		if q[0].left > 0 {
			if q[0].left--; q[0].left == 0 {
				s.byToken[key] = q[1:]
			}
		}
		return r, true
	}
	var zero R
	return zero, false
}

func (s *replyScript[R]) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *replyScript[R]) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

func (s *replyScript[R]) reset() {
	s.mu.Lock()
	s.down, s.byToken = false, nil
	s.mu.Unlock()
}
