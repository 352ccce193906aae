package bus_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
)

func TestSealedMemory(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		inner := bus.NewMemory(bus.MemoryOptions{})
		t.Cleanup(func() { _ = inner.Close() })
		return bustest.Seal(t, inner, bustest.NewKeys(t), bus.SealOptions{})
	})
}

func TestSealedNATS(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		inner := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: bustest.RandomPrefix(t), Name: t.Name()})
		return bustest.Seal(t, inner, bustest.NewKeys(t), bus.SealOptions{})
	})
}

// rejections records what a sealed bus dropped, by reason.
type rejections struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rejections) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = make(map[string]int)
	}
	r.n[reason]++
}

func (r *rejections) get() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.n))
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

// sealedPair is two sealed nodes on one inner bus, and the inner bus itself (the attacker's
// access to the transport): a message from b's subscription on subject arrives on got.
type sealedPair struct {
	inner    *bus.Memory
	keys     *bustest.Keys
	a, b     *bus.Sealed
	rejected *rejections
	got      chan string
}

func newSealedPair(t *testing.T, subject string, opts bus.SealOptions) *sealedPair {
	t.Helper()
	p := &sealedPair{inner: bus.NewMemory(bus.MemoryOptions{}), keys: bustest.NewKeys(t), rejected: &rejections{}, got: make(chan string, 100)}
	t.Cleanup(func() { _ = p.inner.Close() })
	p.a = bustest.Seal(t, p.inner, p.keys, bus.SealOptions{})
	opts.OnReject = p.rejected.add
	p.b = bustest.Seal(t, p.inner, p.keys, opts)
	sub, err := p.b.Subscribe(subject, func(data []byte) { p.got <- string(data) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return p
}

// capture returns the next envelope published on subject of the inner bus, from a.
func (p *sealedPair) capture(t *testing.T, subject, msg string) []byte {
	t.Helper()
	raw := make(chan []byte, 1)
	sub, err := p.inner.Subscribe(subject, func(data []byte) {
		select {
		case raw <- bytes.Clone(data):
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := p.a.Publish(context.Background(), subject, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	p.expect(t, msg)
	select {
	case env := <-raw:
		return env
	case <-time.After(5 * time.Second):
		t.Fatal("no envelope on the inner bus")
		return nil
	}
}

// expect waits for msg at b, failing on anything else arriving first.
func (p *sealedPair) expect(t *testing.T, msg string) {
	t.Helper()
	select {
	case got := <-p.got:
		if got != msg {
			t.Fatalf("b received %q, want %q", got, msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("b never received %q", msg)
	}
}

// sealedBy returns an envelope as a holds it, for inspection: the header fields.
func header(env []byte) (keyID uint32, sender []byte, counter uint64, ts int64) {
	return binary.BigEndian.Uint32(env[1:5]), env[5:21], binary.BigEndian.Uint64(env[21:29]), int64(binary.BigEndian.Uint64(env[29:37]))
}

// TestSealedRejects publishes on the transport what an attacker without the key can: each
// must be dropped before the subscriber and counted under its reason. A real message
// published after each one arrives first, so the attack was processed and dropped (one
// publisher's messages arrive in order).
func TestSealedRejects(t *testing.T) {
	const subject = "parley.user.bob"
	p := newSealedPair(t, subject, bus.SealOptions{})
	env := p.capture(t, subject, `{"k":"e","secret":"hello"}`)
	if bytes.Contains(env, []byte("hello")) || bytes.Contains(env, []byte(`"k"`)) {
		t.Fatalf("the envelope shows its content: %q", env)
	}
	if id, _, _, ts := header(env); id != 1 || time.Since(time.Unix(0, ts)) > time.Minute {
		t.Fatalf("header: key id %d, timestamp %v", id, time.Unix(0, ts))
	}
	// The envelope is plain XChaCha20-Poly1305, as documented.
	keys, _ := p.keys.BusKeys(context.Background())
	x, err := chacha20poly1305.NewX(keys[0].Secret)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := x.Open(nil, env[5:29], env[37:], append([]byte(subject), env[:37]...)); err != nil || string(plain) != `{"k":"e","secret":"hello"}` {
		t.Fatalf("XChaCha20-Poly1305 opens the envelope as %q, %v", plain, err)
	}
	unknown := bytes.Clone(env)
	binary.BigEndian.PutUint32(unknown[1:5], 99)
	altered := bytes.Clone(env)
	altered[len(altered)-20] ^= 1
	altHeader := bytes.Clone(env)
	altHeader[30] ^= 1 // the timestamp: authenticated although in the clear

	ctx := context.Background()
	attacks := []struct {
		name, subject, reason string
		data                  []byte
	}{
		{"plain JSON frame", subject, bus.RejectUnsealed, []byte(`{"n":"x","k":"e","u":"bob","t":"message","d":{}}`)},
		{"empty", subject, bus.RejectUnsealed, nil},
		{"short envelope", subject, bus.RejectMalformed, env[:20]},
		{"unknown key id", subject, bus.RejectUnknownKey, unknown},
		{"altered ciphertext", subject, bus.RejectForged, altered},
		{"altered header", subject, bus.RejectForged, altHeader},
		{"replayed on the same subject", subject, bus.RejectReplayed, env},
	}
	for i, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := p.rejected.get()[a.reason]
			if err := p.inner.Publish(ctx, a.subject, a.data); err != nil {
				t.Fatal(err)
			}
			marker := "marker" + string(rune('a'+i))
			if err := p.a.Publish(ctx, subject, []byte(marker)); err != nil {
				t.Fatal(err)
			}
			p.expect(t, marker)
			if got := p.rejected.get()[a.reason]; got != before+1 {
				t.Errorf("rejected %s: %d, want %d (all: %v)", a.reason, got, before+1, p.rejected.get())
			}
		})
	}
}

// A message sealed for one subject does not open on another: the subject is authenticated.
func TestSealedReplayOntoAnotherSubject(t *testing.T) {
	p := newSealedPair(t, "parley.user.bob", bus.SealOptions{})
	got := make(chan string, 10)
	sub, err := p.b.Subscribe("parley.user.carol", func(data []byte) { got <- string(data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	env := p.capture(t, "parley.user.bob", "for bob")
	if err := p.inner.Publish(context.Background(), "parley.user.carol", env); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Publish(context.Background(), "parley.user.carol", []byte("for carol")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "for carol" {
			t.Fatalf("carol's subscriber received %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing arrived for carol")
	}
	if n := p.rejected.get()[bus.RejectForged]; n != 1 {
		t.Errorf("forged = %d, want 1: %v", n, p.rejected.get())
	}
}

// A message whose timestamp is outside the window is stale, whichever side of the clock.
func TestSealedStale(t *testing.T) {
	const subject = "t.stale"
	p := newSealedPair(t, subject, bus.SealOptions{Window: time.Second})
	for _, skew := range []time.Duration{-time.Minute, time.Minute} {
		old := bustest.Seal(t, p.inner, p.keys, bus.SealOptions{Now: func() time.Time { return time.Now().Add(skew) }})
		if err := old.Publish(context.Background(), subject, []byte("skewed")); err != nil {
			t.Fatal(err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.Publish(context.Background(), subject, []byte("now")); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "now")
	if n := p.rejected.get()[bus.RejectStale]; n != 2 {
		t.Errorf("stale = %d, want 2: %v", n, p.rejected.get())
	}
}

// TestSealedRotation adds a key while two nodes exchange messages: a node that starts
// sealing with it is understood at once by one that has not read it yet (an unknown key id
// reloads the keyring), nothing is dropped, and once two newer keys exist the oldest is
// retired: a node still sealing with it is refused.
func TestSealedRotation(t *testing.T) {
	const subject = "t.rotate"
	// b's clock goes forward two seconds at each step, past the one reload a second an
	// unknown key id may cause.
	var skew atomic.Int64
	p := newSealedPair(t, subject, bus.SealOptions{Reload: time.Hour, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	ctx := context.Background()
	if err := p.a.Publish(ctx, subject, []byte("key 1")); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "key 1")

	p.keys.Add(t)
	reads := p.keys.Reads()
	c := bustest.Seal(t, p.inner, p.keys, bus.SealOptions{}) // seals with key 2
	for _, from := range []*bus.Sealed{c, p.a, c} {          // a still seals with key 1
		if err := from.Publish(ctx, subject, []byte("during")); err != nil {
			t.Fatal(err)
		}
		p.expect(t, "during")
	}
	if got := p.keys.Reads() - reads; got != 2 { // c's start, and b's one reload
		t.Errorf("the key source was read %d times, want 2", got)
	}
	if r := p.rejected.get(); len(r) != 0 {
		t.Fatalf("rejected during the rotation: %v", r)
	}

	p.keys.Add(t) // keys 3 and 2 are kept, 1 is retired
	skew.Add(int64(2 * time.Second))
	d := bustest.Seal(t, p.inner, p.keys, bus.SealOptions{})
	if err := d.Publish(ctx, subject, []byte("key 3")); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "key 3") // b reloads: it now keeps keys 3 and 2
	skew.Add(int64(2 * time.Second))
	if err := p.a.Publish(ctx, subject, []byte("retired")); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, subject, []byte("key 2")); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "key 2")
	if r := p.rejected.get(); r[bus.RejectUnknownKey] != 1 || len(r) != 1 {
		t.Errorf("rejected %v, want one unknown_key (the retired key)", r)
	}
}

// An unknown key id makes the node read the keyring at most once a second, however many
// arrive: an attacker can send as many as they like. The receiver's clock stands still,
// so all of them arrive within one second of the first, however slow the machine.
func TestSealedUnknownKeyReloadIsRateLimited(t *testing.T) {
	const subject = "t.unknown"
	start := time.Now()
	p := newSealedPair(t, subject, bus.SealOptions{Reload: time.Hour, Now: func() time.Time { return start }})
	env := p.capture(t, subject, "x")
	reads := p.keys.Reads()
	for i := range 100 {
		binary.BigEndian.PutUint32(env[1:5], uint32(1000+i))
		if err := p.inner.Publish(context.Background(), subject, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.Publish(context.Background(), subject, []byte("after")); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "after")
	if got := p.keys.Reads() - reads; got != 1 {
		t.Errorf("100 unknown key ids read the keyring %d times, want once", got)
	}
	if n := p.rejected.get()[bus.RejectUnknownKey]; n != 100 {
		t.Errorf("unknown_key = %d, want 100", n)
	}
}

func TestSealNeedsAKey(t *testing.T) {
	inner := bus.NewMemory(bus.MemoryOptions{})
	defer inner.Close()
	if _, err := bus.Seal(context.Background(), inner, &bustest.Keys{}, bus.SealOptions{}); err == nil {
		t.Fatal("Seal with no key succeeded")
	}
}

// loopback is a bus that calls its one handler inside Publish: the benchmark measures the
// sealing alone.
type loopback struct{ h func([]byte) }

func (l *loopback) Publish(_ context.Context, _ string, data []byte) error { l.h(data); return nil }
func (l *loopback) Subscribe(_ string, h func([]byte)) (bus.Subscription, error) {
	l.h = h
	return l, nil
}
func (l *loopback) Close() error       { return nil }
func (l *loopback) Unsubscribe() error { return nil }

// BenchmarkSealOpen seals and opens a typical 200-byte message (a wake-up or an event
// notice with its frame).
func BenchmarkSealOpen(b *testing.B) {
	s := bustest.Seal(b, &loopback{}, bustest.NewKeys(b), bus.SealOptions{})
	n := 0
	subject := bus.UserSubject("bob")
	if _, err := s.Subscribe(subject, func(data []byte) { n += len(data) }); err != nil {
		b.Fatal(err)
	}
	msg := bytes.Repeat([]byte("x"), 200)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := s.Publish(ctx, subject, msg); err != nil {
			b.Fatal(err)
		}
	}
	if n != 200*b.N {
		b.Fatalf("opened %d bytes, want %d", n, 200*b.N)
	}
}

// BenchmarkSealOpenParallel is BenchmarkSealOpen from many goroutines: the replay record
// must not make them wait for one another.
func BenchmarkSealOpenParallel(b *testing.B) {
	keys := bustest.NewKeys(b)
	msg := bytes.Repeat([]byte("x"), 200)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := bustest.Seal(b, &loopback{}, keys, bus.SealOptions{})
		if _, err := s.Subscribe("t.b", func([]byte) {}); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			_ = s.Publish(context.Background(), "t.b", msg)
		}
	})
}

// FuzzSealedOpen hands the opening side whatever an attacker may publish: it must never
// panic, and nothing but a genuine envelope reaches the handler.
func FuzzSealedOpen(f *testing.F) {
	inner := bus.NewMemory(bus.MemoryOptions{})
	defer inner.Close()
	keys := bustest.NewKeys(f)
	a := bustest.Seal(f, inner, keys, bus.SealOptions{})
	env := make(chan []byte, 1)
	raw, err := inner.Subscribe("t.fuzz", func(data []byte) { env <- bytes.Clone(data) })
	if err != nil {
		f.Fatal(err)
	}
	if err := a.Publish(context.Background(), "t.fuzz", []byte(`{"k":"w","c":1}`)); err != nil {
		f.Fatal(err)
	}
	sealed := <-env
	_ = raw.Unsubscribe()
	f.Add(sealed)
	f.Add([]byte(`{"n":"x","k":"e"}`))
	f.Add(sealed[:40])
	f.Add([]byte{0xA1})
	b := &loopback{}
	s := bustest.Seal(f, b, keys, bus.SealOptions{})
	var got [][]byte
	if _, err := s.Subscribe("t.fuzz", func(data []byte) { got = append(got, bytes.Clone(data)) }); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got = got[:0]
		b.h(data)
		if len(got) > 0 && !bytes.Equal(data, sealed) {
			t.Fatalf("a made-up envelope %x opened as %q", data, got[0])
		}
	})
}
