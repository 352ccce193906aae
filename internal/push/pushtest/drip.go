package pushtest

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Drip is a hostile Web Push service on httptest servers (plain HTTP at 127.0.0.1, each
// server an origin of its own): it answers each request's status and headers at once, then
// drips the body, a byte every DripEvery, until the test calls Release or the client goes
// away. It is the attack on a pusher's workers that a deadline covering the body must
// defeat. It counts, over all its servers, the requests it holds and those the client cut
// off before Release.
type Drip struct {
	srvs    []*httptest.Server
	next    atomic.Uint64 // the server of the next Subscription
	status  int
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex // guards the fields below
	held    int        // requests whose body is still dripping
	cut     int        // requests the client gave up before Release
	total   int        // requests seen
	changed chan struct{}
}

// DripEvery is how often a Drip writes one more byte of a body.
const DripEvery = 50 * time.Millisecond

// NewDrip starts a Drip on origins servers that answers status (201 to look accepted, 503 to
// look down), closed (and released) when the test ends.
func NewDrip(tb testing.TB, status, origins int) *Drip {
	tb.Helper()
	d := &Drip{status: status, release: make(chan struct{}), changed: make(chan struct{})}
	for range max(origins, 1) {
		d.srvs = append(d.srvs, httptest.NewServer(http.HandlerFunc(d.serve)))
	}
	tb.Cleanup(func() {
		d.Release()
		for _, srv := range d.srvs {
			srv.Close()
		}
	})
	return d
}

func (d *Drip) serve(w http.ResponseWriter, r *http.Request) {
	d.update(func() { d.total++; d.held++ })
	released := false
	defer func() {
		d.update(func() {
			d.held--
			if !released {
				d.cut++
			}
		})
	}()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(d.status)
	f, _ := w.(http.Flusher)
	if f != nil {
		f.Flush()
	}
	t := time.NewTicker(DripEvery)
	defer t.Stop()
	for {
		select {
		case <-d.release:
			released = true
			return
		case <-r.Context().Done():
			return
		case <-t.C:
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
	}
}

// update changes the counts under the lock and tells the waiters.
func (d *Drip) update(fn func()) {
	d.mu.Lock()
	fn()
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

// Subscription returns a subscription to an endpoint of its own, on the servers in turn, as
// NewSubscriptionTo makes it.
func (d *Drip) Subscription() string {
	srv := d.srvs[(d.next.Add(1)-1)%uint64(len(d.srvs))]
	return NewSubscriptionTo(srv.URL + "/push/" + rand.Text())
}

// NewSubscriptionTo returns a subscription to endpoint as a browser's
// PushSubscription.toJSON() gives it, with fresh valid keys (whose private parts nobody
// keeps): for endpoints that are not a WebPush fake.
func NewSubscriptionTo(endpoint string) string {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	b, _ := json.Marshal(map[string]any{
		"endpoint": endpoint,
		"keys": map[string]string{
			"p256dh": base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
			"auth":   base64.RawURLEncoding.EncodeToString(auth),
		},
	})
	return string(b)
}

// Counts returns how many requests are held now, how many the client cut off before
// Release, and how many came in all.
func (d *Drip) Counts() (held, cut, total int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held, d.cut, d.total
}

// WaitHeld waits until at least n requests are held at once.
func (d *Drip) WaitHeld(ctx context.Context, n int) error {
	for {
		d.mu.Lock()
		held, ch := d.held, d.changed
		d.mu.Unlock()
		if held >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drip: %d requests held, want %d: %w", held, n, ctx.Err())
		case <-ch:
		}
	}
}

// Release ends every held body, and those of later requests at once.
func (d *Drip) Release() { d.once.Do(func() { close(d.release) }) }
