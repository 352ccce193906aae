package pushtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// WebPush is a fake Web Push service (RFC 8030) on an httptest server. It hands out
// subscriptions whose private keys it keeps, checks each push's VAPID Authorization
// (RFC 8292) and headers, decrypts its aes128gcm body (RFC 8291) and records the JSON, so a
// test sees exactly what a browser's service worker would get. Its answers can be scripted:
// failures with Retry-After for the next requests, a subscription gone (404 or 410), the
// whole service down. It is safe for concurrent use; the crypto of a request runs outside
// any lock, so it keeps up with thousands of concurrent pushes. Like the other fakes it
// counts what it accepted by push_id (Count, Repeats, WaitCount) and has SetDown and Reset.
type WebPush struct {
	fakeService[WebPushMessage, webPushReply]
	origin string // scheme://host:port, the aud a VAPID token must carry

	mu       sync.Mutex // guards the fields below
	subs     map[string]*webPushSub
	vapidKey string // when set, the k every push must carry
	errs     []string
}

// webPushReply is a scripted answer (FailNext).
type webPushReply struct {
	status     int
	retryAfter string
}

// webPushSub is one subscription's secrets, as a browser holds them.
type webPushSub struct {
	id       string
	priv     *ecdh.PrivateKey
	auth     []byte
	goneWith int // 0, or the status (404, 410) every push to it gets
}

// WebPushMessage is one push the fake accepted, decrypted.
type WebPushMessage struct {
	SubscriptionID string
	TTL            int
	Topic          string
	Urgency        string
	VAPIDKey       string // the k of the Authorization header, base64url
	Subject        string // the VAPID token's sub claim
	Payload        []byte // the decrypted body
	// Data is Payload as a JSON object of strings (push.Notification.Data()); nil when the
	// payload is not one.
	Data map[string]string
}

// NewWebPush starts a fake on plain HTTP at 127.0.0.1 (so a provider needs AllowPrivate),
// closed when the test ends.
func NewWebPush(tb testing.TB) *WebPush {
	tb.Helper()
	f := &WebPush{subs: map[string]*webPushSub{}}
	f.srv = httptest.NewServer(f)
	f.origin = f.srv.URL
	tb.Cleanup(f.srv.Close)
	return f
}

// NewWebPushTLS starts a fake on HTTPS (HTTP/2 allowed) at 127.0.0.1; a client must trust
// TLSConfig().
func NewWebPushTLS(tb testing.TB) *WebPush {
	tb.Helper()
	f := &WebPush{subs: map[string]*webPushSub{}}
	f.srv = startFakeTLS(tb, f)
	f.origin = f.srv.URL
	return f
}

// TLSConfig returns a client TLS configuration that trusts the fake: nil for plain HTTP.
func (f *WebPush) TLSConfig() *tls.Config {
	if f.srv.TLS == nil {
		return nil
	}
	return f.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

// NewSubscription makes a subscription as a browser's PushSubscription.toJSON() would give
// it: {"endpoint": URL()+"/push/<id>", "keys": {"p256dh", "auth"}}, with a fresh P-256 key
// pair and 16-byte auth secret whose private parts the fake keeps to decrypt.
func (f *WebPush) NewSubscription() string {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	s := &webPushSub{id: rand.Text(), priv: priv, auth: make([]byte, 16)}
	_, _ = rand.Read(s.auth)
	f.mu.Lock()
	f.subs[s.id] = s
	f.mu.Unlock()
	b, _ := json.Marshal(map[string]any{
		"endpoint": f.srv.URL + "/push/" + s.id,
		"keys": map[string]string{
			"p256dh": base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
			"auth":   base64.RawURLEncoding.EncodeToString(s.auth),
		},
	})
	return string(b)
}

// SubscriptionID returns the id of a subscription (its JSON, its endpoint or its id): the
// SubscriptionID of the messages pushed to it.
func (f *WebPush) SubscriptionID(subscription string) string {
	endpoint := subscription
	if strings.HasPrefix(strings.TrimSpace(subscription), "{") {
		var s struct {
			Endpoint string `json:"endpoint"`
		}
		_ = json.Unmarshal([]byte(subscription), &s)
		endpoint = s.Endpoint
	}
	if _, id, ok := strings.Cut(endpoint, "/push/"); ok {
		return id
	}
	return endpoint // an id already
}

// RequireVAPIDKey makes every push carry k (base64url) in its Authorization header, as a
// real service checks the applicationServerKey a browser subscribed with; 403 otherwise.
func (f *WebPush) RequireVAPIDKey(k string) {
	f.mu.Lock()
	f.vapidKey = k
	f.mu.Unlock()
}

// FailNext answers the next k pushes to known subscriptions with status (429, 500, 503, …)
// and, when retryAfter is not empty, that Retry-After header ("2" or an HTTP date). Scripts
// queue up; Reset drops them.
func (f *WebPush) FailNext(k, status int, retryAfter string) {
	f.replies.add("", webPushReply{status: status, retryAfter: retryAfter}, max(k, 1))
}

// Unsubscribe makes every later push to subscription (its JSON, endpoint or id) answer
// status: 410 Gone as when the user revoked permission, or 404 Not Found as for an
// expired subscription.
func (f *WebPush) Unsubscribe(subscription string, status int) {
	id := f.SubscriptionID(subscription)
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.subs[id]; s != nil {
		s.goneWith = status
	}
}

// Messages returns the pushes accepted so far, in the order they were, repeats included.
func (f *WebPush) Messages() []WebPushMessage { return f.tally.list() }

// Errors returns why the fake refused pushes that broke the protocol (a bad VAPID token, a
// missing TTL, a body it could not decrypt): a test expecting none checks it is empty.
func (f *WebPush) Errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

// ServeHTTP is the push service: POST /push/<id>.
func (f *WebPush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/push/")
	if !ok || r.Method != http.MethodPost {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil {
		return
	}
	f.tally.request()
	sub, status, retry := f.script(id)
	if status != 0 {
		answer(w, status, retry, "scripted")
		return
	}
	m, status, err := f.check(r, body, sub)
	if err != nil {
		f.mu.Lock()
		f.errs = append(f.errs, fmt.Sprintf("%d: %v", status, err))
		f.mu.Unlock()
		answer(w, status, "", err.Error())
		return
	}
	f.tally.accept(m.Data["push_id"], m)
	w.Header().Set("Location", f.srv.URL+"/message/"+rand.Text())
	answer(w, http.StatusCreated, "", "")
}

// script returns the request's subscription, or the status (and Retry-After) to answer
// instead: 503 while down, 404 for an unknown subscription, its status for one that is gone,
// then what FailNext queued.
func (f *WebPush) script(id string) (*webPushSub, int, string) {
	if f.replies.isDown() {
		return nil, http.StatusServiceUnavailable, "1"
	}
	f.mu.Lock()
	sub := f.subs[id]
	f.mu.Unlock()
	switch {
	case sub == nil:
		return nil, http.StatusNotFound, ""
	case sub.goneWith != 0:
		return nil, sub.goneWith, ""
	}
	if r, ok := f.replies.next(id); ok && (r.status < 200 || r.status > 299) {
		return nil, r.status, r.retryAfter
	}
	return sub, 0, ""
}

func answer(w http.ResponseWriter, status int, retryAfter, msg string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

// check verifies a push's headers and VAPID token and decrypts its body; on failure it
// returns the status a push service would answer.
func (f *WebPush) check(r *http.Request, body []byte, sub *webPushSub) (WebPushMessage, int, error) {
	m := WebPushMessage{SubscriptionID: sub.id, Topic: r.Header.Get("Topic"), Urgency: r.Header.Get("Urgency")}
	if len(body) > 4096 {
		return m, http.StatusRequestEntityTooLarge, errors.New("body over 4096 bytes")
	}
	ttl, err := strconv.Atoi(r.Header.Get("TTL"))
	if err != nil || ttl < 0 {
		return m, http.StatusBadRequest, fmt.Errorf("ttl header %q: want a non-negative integer", r.Header.Get("TTL"))
	}
	m.TTL = ttl
	switch m.Urgency {
	case "", "very-low", "low", "normal", "high":
	default:
		return m, http.StatusBadRequest, fmt.Errorf("urgency header %q: want very-low, low, normal or high", m.Urgency)
	}
	if !validTopic(m.Topic) {
		return m, http.StatusBadRequest, fmt.Errorf("topic header %q: want at most 32 base64url characters", m.Topic)
	}
	f.mu.Lock()
	want := f.vapidKey
	f.mu.Unlock()
	k, subject, status, err := checkVAPID(r.Header.Get("Authorization"), f.origin, time.Now())
	if err != nil {
		return m, status, err
	}
	if want != "" && k != want {
		return m, http.StatusForbidden, fmt.Errorf("VAPID key %s, the subscription was made with %s", k, want)
	}
	m.VAPIDKey, m.Subject = k, subject
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		return m, http.StatusBadRequest, fmt.Errorf("Content-Encoding %q: want aes128gcm", ce)
	}
	m.Payload, err = decrypt(body, sub)
	if err != nil {
		return m, http.StatusBadRequest, err
	}
	var data map[string]string
	if json.Unmarshal(m.Payload, &data) == nil {
		m.Data = data
	}
	return m, 0, nil
}

// validTopic: empty, or at most 32 characters of the base64url alphabet (RFC 8030 5.4).
func validTopic(s string) bool {
	return len(s) <= 32 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

// checkVAPID checks an Authorization header "vapid t=<JWT>, k=<public key>": an ES256 JWT
// signed by k, aud the endpoint's origin, exp in the future and at most 24 hours away, sub
// a mailto: or https: contact. It returns k and sub.
func checkVAPID(h, origin string, now time.Time) (k, sub string, status int, err error) {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return "", "", http.StatusUnauthorized, fmt.Errorf("authorization %q: want vapid t=…, k=…", h)
	}
	var t string
	for _, p := range strings.Split(rest, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch name {
		case "t":
			t = val
		case "k":
			k = val
		}
	}
	kb, err := base64.RawURLEncoding.DecodeString(k)
	if err != nil {
		return "", "", http.StatusUnauthorized, errors.New("vapid k: not base64url")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), kb)
	if err != nil {
		return "", "", http.StatusUnauthorized, errors.New("vapid k: not an uncompressed P-256 key")
	}
	parts := strings.Split(t, ".")
	if len(parts) != 3 {
		return "", "", http.StatusUnauthorized, errors.New("vapid t: not a JWT")
	}
	var head struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}
	if err := decodeJWTPart(parts[0], &head); err != nil || head.Alg != "ES256" {
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid t: header: alg %q, want ES256 (%v)", head.Alg, err)
	}
	if err := decodeJWTPart(parts[1], &claims); err != nil {
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid t: claims: %v", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return "", "", http.StatusUnauthorized, errors.New("vapid t: signature: want 64 bytes r||s")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, digest[:], r, s) {
		return "", "", http.StatusUnauthorized, errors.New("vapid t: signature does not verify with k")
	}
	switch exp := time.Unix(claims.Exp, 0); {
	case claims.Aud != origin:
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid aud %q, want %q", claims.Aud, origin)
	case !exp.After(now):
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid exp %v has passed", exp)
	case exp.After(now.Add(24 * time.Hour)):
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid exp %v more than 24 hours away", exp)
	case !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:"):
		return "", "", http.StatusUnauthorized, fmt.Errorf("vapid sub %q: want a mailto: or https: subject", claims.Sub)
	}
	return k, claims.Sub, 0, nil
}

func decodeJWTPart(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// decrypt opens an aes128gcm body (RFC 8188) encrypted for sub as RFC 8291 says: the header
// salt(16) | rs(4) | idlen(1) | keyid (the sender's ephemeral P-256 key), then one record.
func decrypt(body []byte, sub *webPushSub) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("aes128gcm: body shorter than its header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idlen != 65 || len(body) < 21+idlen {
		return nil, fmt.Errorf("aes128gcm: keyid of %d bytes, want the sender's 65-byte P-256 key", idlen)
	}
	senderPub, record := body[21:21+idlen], body[21+idlen:]
	if rs < 18 || uint32(len(record)) > rs {
		return nil, fmt.Errorf("aes128gcm: record of %d bytes with rs %d: want one record", len(record), rs)
	}
	as, err := ecdh.P256().NewPublicKey(senderPub)
	if err != nil {
		return nil, fmt.Errorf("aes128gcm: sender key: %v", err)
	}
	shared, err := sub.priv.ECDH(as)
	if err != nil {
		return nil, fmt.Errorf("aes128gcm: ecdh: %v", err)
	}
	keyInfo := "WebPush: info\x00" + string(sub.priv.PublicKey().Bytes()) + string(senderPub)
	ikm, err := hkdf.Key(sha256.New, shared, sub.auth, keyInfo, 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, record, nil)
	if err != nil {
		return nil, fmt.Errorf("aes128gcm: record does not decrypt with the subscription's keys: %v", err)
	}
	// The last record ends with the delimiter 0x02, then zero padding.
	end := len(plain) - 1
	for end >= 0 && plain[end] == 0 {
		end--
	}
	if end < 0 || plain[end] != 0x02 {
		return nil, errors.New("aes128gcm: no 0x02 padding delimiter: want a single, last record")
	}
	return plain[:end], nil
}
