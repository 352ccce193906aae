package bus

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/parleychat/parley/internal/tasks"
)

// KeySize is the length of a cluster key's secret: a XChaCha20-Poly1305 key.
const KeySize = chacha20poly1305.KeySize

// Key is one cluster key: the nodes seal with the newest and open with any of the keyring.
type Key struct {
	ID     uint32 // names the key in every envelope; a newer key has a higher id
	Secret []byte // KeySize bytes, known only to the nodes (and the store they share)
}

// KeySource lists the cluster keys, in any order. It is the shared store: every node reads
// the same keys from it.
type KeySource interface {
	BusKeys(ctx context.Context) ([]Key, error)
}

// The reasons a sealed bus drops a message, the label values of parley_bus_rejected_total.
const (
	RejectUnsealed   = "unsealed"    // not an envelope at all (a plain publish on the NATS server)
	RejectUnknownKey = "unknown_key" // sealed with a key not in the keyring, even after a reload
	RejectReplayed   = "replayed"    // an envelope this node already opened (same sender and counter)
	RejectStale      = "stale"       // a timestamp outside the replay window
	RejectForged     = "forged"      // it failed authentication: wrong key, altered, or sealed for another subject
	RejectMalformed  = "malformed"   // an envelope too short to hold its header and tag, or an opened message that is not one of Parley's
	// RejectInvalid is the reason of a message that opened but whose fields do not hold
	// (an id out of form, a seq out of range, a conversation other than the subject's):
	// chat's checks of what a node holding the key sent.
	RejectInvalid = "invalid"
)

// RejectReasons lists every reason, so that a counter can be created for each up front.
var RejectReasons = []string{RejectUnsealed, RejectUnknownKey, RejectReplayed, RejectStale, RejectForged, RejectMalformed, RejectInvalid}

// ErrNoKey is returned by Seal when the key source holds no usable key.
var ErrNoKey = errors.New("bus: no cluster key")

// SealOptions configure a sealed bus. The zero value is ready to use.
type SealOptions struct {
	// Window is how far a message's timestamp may be from this node's clock, either way
	// (30 seconds if zero). Older or later envelopes are dropped as stale; within it, the
	// per-sender record of counters drops a second copy.
	Window time.Duration
	// Reload is how often the keyring is read again from the key source (30 seconds if
	// zero), so that a key added elsewhere is used and a retired key stops being accepted.
	Reload time.Duration
	// Keep is how many of the newest keys are accepted (2 if zero): a key older than the
	// Keep newest is retired.
	Keep int
	// OnReject, if set, is called with the reason of each message dropped (one of
	// RejectReasons), on the delivering goroutine. It must be cheap.
	OnReject func(reason string)
	// Logger receives a warning at most once a minute while messages are rejected, and
	// the keyring's reload failures (slog.Default() if nil).
	Logger *slog.Logger
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// Sealed is a Bus that seals every message it publishes with the newest cluster key, and
// hands its subscribers only the messages that open with a key of its keyring, from a node
// holding the key, for the subject they were published on, inside the replay window, and
// not seen before. Whoever can read or write the transport without the key can neither read
// a message's content nor have a node accept one it made or replayed.
//
// The envelope is
//
//	version (1) | key id (4) | sender (16) | counter (8) | timestamp (8) | ciphertext | tag (16)
//
// sealed with XChaCha20-Poly1305: the nonce is sender and counter (a random id per Sealed
// value and a counter it never repeats, so a nonce is never used twice with one key), and
// the additional data is the subject followed by the header, so that every header field is
// authenticated and a message sealed for one subject does not open on another.
// XChaCha20's first step depends only on the key and the nonce's first 16 bytes, the
// sender, so it is done once per sender and key (sealKey.own, senderWindow.aeads) and each
// message costs one ChaCha20-Poly1305 with no allocation.
//
// Sealed keeps the guarantees of Bus. Close ends its own subscriptions and leaves the inner
// bus open: its owner closes it.
type Sealed struct {
	inner  Bus
	keys   KeySource
	window int64 // nanoseconds
	noEcho bool  // the inner bus never hands this bus its own messages (NATS.NoEcho)
	keep   int
	reject func(string)
	log    *slog.Logger
	now    func() time.Time

	sender  [senderLen]byte
	counter atomic.Uint64

	ring     atomic.Pointer[keyring]
	reloadMu sync.Mutex // guards lastReload; held while a reload runs, so reloads do not overlap
	// lastReload is when the keyring was last read on an unknown key id (rate-limited).
	lastReload time.Time

	// senders is each sender's record of counters, replaced whole (under sendersMu) when a
	// sender is added or forgotten, so that a message reads it without a lock.
	senders    atomic.Pointer[map[[senderLen]byte]*senderWindow]
	sendersMu  sync.Mutex
	rejections atomic.Int64 // since the last warning
	lastWarn   atomic.Int64 // Unix nanoseconds of the last warning

	bufs sync.Pool // *[]byte scratch for an envelope and its additional data

	mu     sync.Mutex // guards topics, and closed's change
	topics map[string]*sealedTopic
	closed atomic.Bool
	bg     *tasks.Group // the reloader; Close ends it and waits, so no reload reads a closed store
}

var _ Bus = (*Sealed)(nil)

const (
	sealVersion = 0xA1 // the first byte of every envelope: no JSON value starts with it
	senderLen   = 16
	headerLen   = 1 + 4 + senderLen + 8 + 8
	tagLen      = chacha20poly1305.Overhead
	nonceLen    = chacha20poly1305.NonceSize
	// maxSenders bounds the senders whose counters are remembered. Only holders of the key
	// can add one (a sender counts once its message opened), and a node adds one per start.
	maxSenders = 4096
	// reloadEvery bounds the reloads an unknown key id causes: an attacker may send such
	// ids freely.
	reloadEvery = time.Second
	warnPeriod  = time.Minute
)

// keyring is the keys a node accepts, newest first; the first seals.
type keyring struct {
	keys []sealKey
}

type sealKey struct {
	id     uint32
	secret []byte
	own    cipher.AEAD // for this node's sender id, built once per key
}

func (r *keyring) get(id uint32) *sealKey {
	for i := range r.keys {
		if r.keys[i].id == id {
			return &r.keys[i]
		}
	}
	return nil
}

// senderAEAD is XChaCha20-Poly1305 with secret for the nonces that start with sender: the
// ChaCha20-Poly1305 of the key HChaCha20 derives from them, which takes the nonce's last 8
// bytes after 4 zero bytes.
func senderAEAD(secret []byte, sender []byte) (cipher.AEAD, error) {
	sub, err := chacha20.HChaCha20(secret, sender)
	if err != nil {
		return nil, err
	}
	return chacha20poly1305.New(sub)
}

// Seal returns inner sealed with the keys of keys, which must hold at least one (ErrNoKey
// otherwise). The keyring is read again every opts.Reload, and at most once a second when
// a message names a key id the node does not know (a key another node has just started
// using), until Close.
func Seal(ctx context.Context, inner Bus, keys KeySource, opts SealOptions) (*Sealed, error) {
	if opts.Window <= 0 {
		opts.Window = 30 * time.Second
	}
	if opts.Reload <= 0 {
		opts.Reload = 30 * time.Second
	}
	if opts.Keep <= 0 {
		opts.Keep = 2
	}
	if opts.OnReject == nil {
		opts.OnReject = func(string) {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Sealed{inner: inner, keys: keys, window: int64(opts.Window), keep: opts.Keep, reject: opts.OnReject,
		log: opts.Logger, now: opts.Now, topics: make(map[string]*sealedTopic), bg: tasks.New()}
	if e, ok := inner.(interface{ NoEcho() bool }); ok {
		s.noEcho = e.NoEcho()
	}
	if _, err := rand.Read(s.sender[:]); err != nil {
		return nil, fmt.Errorf("bus: seal: sender id: %w", err)
	}
	s.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	s.senders.Store(&map[[senderLen]byte]*senderWindow{})
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	s.bg.Go(func(ctx context.Context) { s.reloader(ctx, opts.Reload) })
	return s, nil
}

// reload reads the keyring from the key source. It keeps the current keyring on failure.
func (s *Sealed) reload(ctx context.Context) error {
	list, err := s.keys.BusKeys(ctx)
	if err != nil {
		return fmt.Errorf("bus: read cluster keys: %w", err)
	}
	slices.SortFunc(list, func(a, b Key) int { return int(int64(b.ID) - int64(a.ID)) })
	r := &keyring{}
	for _, k := range list {
		if len(r.keys) == s.keep {
			break
		}
		own, err := senderAEAD(k.Secret, s.sender[:])
		if err != nil {
			return fmt.Errorf("bus: cluster key %d: %w", k.ID, err)
		}
		r.keys = append(r.keys, sealKey{id: k.ID, secret: k.Secret, own: own})
	}
	if len(r.keys) == 0 {
		return ErrNoKey
	}
	s.ring.Store(r)
	return nil
}

// reloader reads the keyring every period and forgets the senders not heard from for long
// enough that none of their messages can still be inside the window, until Close.
func (s *Sealed) reloader(life context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-life.Done():
			return
		case <-t.C:
		}
		// Bounded well below the period: a delivering goroutine that meets an unknown key
		// id waits for this reload.
		ctx, cancel := context.WithTimeout(life, min(period, 5*time.Second))
		s.reloadMu.Lock()
		err := s.reload(ctx)
		s.reloadMu.Unlock()
		cancel()
		if err != nil {
			s.log.Warn("bus: reload cluster keys", "err", err)
		}
		s.forgetSenders()
	}
}

// forgetSenders drops the record of senders last heard more than three windows ago: a
// message of theirs has a timestamp within a window of when it was last heard (else it was
// stale), so a copy of it is stale by now too.
func (s *Sealed) forgetSenders() {
	cutoff := s.now().UnixNano() - 3*s.window
	s.sendersMu.Lock()
	defer s.sendersMu.Unlock()
	old := *s.senders.Load()
	next := make(map[[senderLen]byte]*senderWindow, len(old))
	for k, w := range old {
		if w.last.Load() >= cutoff {
			next[k] = w
		}
	}
	s.senders.Store(&next)
}

// keyFor returns key id, reading the keyring again (at most once a second)
// when the node does not know it: another node may have started sealing with a new key.
func (s *Sealed) keyFor(id uint32) *sealKey {
	if a := s.ring.Load().get(id); a != nil {
		return a
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if a := s.ring.Load().get(id); a != nil { // another goroutine reloaded meanwhile
		return a
	}
	if now := s.now(); now.Sub(s.lastReload) >= reloadEvery {
		s.lastReload = now
		ctx, cancel := context.WithTimeout(s.bg.Context(), time.Second)
		err := s.reload(ctx)
		cancel()
		if err != nil {
			s.log.Warn("bus: reload cluster keys", "err", err)
		}
	}
	return s.ring.Load().get(id)
}

// Publish implements Bus: it seals data for subject and publishes the envelope on the
// inner bus. It allocates nothing of its own: the envelope is built in a pooled buffer,
// which the inner bus copies.
func (s *Sealed) Publish(ctx context.Context, subject string, data []byte) error {
	if err := checkPublish(ctx, subject); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	bp := s.getBuf()
	defer s.putBuf(bp)
	key := &s.ring.Load().keys[0]
	// The buffer is nonce | subject | header | ciphertext | tag: the additional data
	// (subject and header) is contiguous, and the envelope is the part after the subject.
	buf := slices.Grow((*bp)[:0], nonceLen+len(subject)+headerLen+len(data)+tagLen)
	n := s.counter.Add(1)
	buf = binary.BigEndian.AppendUint64(append(buf, 0, 0, 0, 0), n)
	buf = append(buf, subject...)
	buf = append(buf, sealVersion)
	buf = binary.BigEndian.AppendUint32(buf, key.id)
	buf = append(buf, s.sender[:]...)
	buf = binary.BigEndian.AppendUint64(buf, n)
	buf = binary.BigEndian.AppendUint64(buf, uint64(s.now().UnixNano()))
	hdr := nonceLen + len(subject)
	buf = key.own.Seal(buf, buf[:nonceLen], data, buf[nonceLen:hdr+headerLen])
	*bp = buf
	return s.inner.Publish(ctx, subject, buf[hdr:])
}

// maxPooled is the largest buffer kept for reuse: a rare large message does not hold its
// memory for ever.
const maxPooled = 64 << 10

func (s *Sealed) getBuf() *[]byte { return s.bufs.Get().(*[]byte) }

func (s *Sealed) putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooled {
		s.bufs.Put(bp)
	}
}

// Subscribe implements Bus: handler sees the opened content of the messages that pass every
// check; the others are dropped and counted. A Sealed value subscribes to each subject on
// the inner bus once and opens each message once, whatever the number of its own
// subscriptions to it (a second copy of an envelope is a replay): the subscriptions of one
// subject are called one after the other, on the inner subscription's goroutine.
func (s *Sealed) Subscribe(subject string, handler func(data []byte)) (Subscription, error) {
	if err := checkSubscribe(subject, handler); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	top := s.topics[subject]
	if top == nil {
		top = &sealedTopic{subject: subject}
		top.handlers.Store(&[]*sealedSub{})
		inner, err := s.inner.Subscribe(subject, func(data []byte) { s.deliver(top, data) })
		if err != nil {
			return nil, err
		}
		top.inner = inner
		s.topics[subject] = top
	}
	sub := &sealedSub{s: s, top: top, handler: handler}
	hs := *top.handlers.Load()
	top.handlers.Store(ptr(append(hs[:len(hs):len(hs)], sub)))
	return sub, nil
}

func ptr[T any](v T) *T { return &v }

// sealedTopic is a Sealed value's one subscription of a subject on the inner bus.
type sealedTopic struct {
	subject  string
	inner    Subscription
	handlers atomic.Pointer[[]*sealedSub] // replaced whole, under Sealed.mu
}

// deliver opens data, published on top's subject, into a pooled buffer and hands it to
// the topic's handlers.
func (s *Sealed) deliver(top *sealedTopic, data []byte) {
	hs := *top.handlers.Load()
	if len(hs) == 0 {
		return
	}
	bp := s.getBuf()
	defer s.putBuf(bp)
	plain, reason := s.open(bp, top.subject, data)
	if reason != "" {
		s.rejected(reason)
		return
	}
	for _, h := range hs {
		if !h.ended.Load() {
			h.handler(plain)
		}
	}
}

// open checks and opens one envelope, returning its content (in *bp) or why it is dropped.
func (s *Sealed) open(bp *[]byte, subject string, data []byte) ([]byte, string) {
	switch {
	case len(data) == 0 || data[0] != sealVersion:
		return nil, RejectUnsealed
	case len(data) < headerLen+tagLen:
		return nil, RejectMalformed
	}
	key := s.keyFor(binary.BigEndian.Uint32(data[1:5]))
	if key == nil {
		return nil, RejectUnknownKey
	}
	sender := [senderLen]byte(data[5 : 5+senderLen])
	if s.noEcho && sender == s.sender { // a copy of this bus's own, published by another
		return nil, RejectReplayed
	}
	w := (*s.senders.Load())[sender]
	aead := w.aead(key.id)
	derived := aead == nil
	if derived { // a sender or key not seen yet: kept only once a message opens with it
		var err error
		if aead, err = senderAEAD(key.secret, sender[:]); err != nil {
			return nil, RejectForged
		}
	}
	buf := slices.Grow((*bp)[:0], nonceLen+len(subject)+len(data))
	buf = append(buf, 0, 0, 0, 0)
	buf = append(buf, data[5+senderLen:5+senderLen+8]...)
	buf = append(buf, subject...)
	buf = append(buf, data[:headerLen]...)
	aad := len(buf)
	plain, err := aead.Open(buf[aad:aad], buf[:nonceLen], data[headerLen:], buf[nonceLen:aad])
	if err != nil {
		return nil, RejectForged
	}
	*bp = buf
	now := s.now().UnixNano()
	if ts := int64(binary.BigEndian.Uint64(data[5+senderLen+8 : headerLen])); ts < now-s.window || ts > now+s.window {
		return nil, RejectStale
	}
	if w == nil {
		if w = s.addSender(sender); w == nil {
			return nil, RejectReplayed
		}
	}
	if derived {
		w.addAEAD(key.id, aead)
	}
	if !w.fresh(binary.BigEndian.Uint64(data[5+senderLen:5+senderLen+8]), now) {
		return nil, RejectReplayed
	}
	return plain, ""
}

// fresh records counter and reports whether it was the first time.
func (w *senderWindow) fresh(counter uint64, now int64) bool {
	if now-w.last.Load() > int64(time.Second) { // written once a second, not by every message
		w.last.Store(now)
	}
	return w.shards[counter%replayShards].accept(counter / replayShards)
}

// aead returns the sender's AEAD for key id, nil if there is none yet (or w is nil).
func (w *senderWindow) aead(id uint32) cipher.AEAD {
	if w == nil {
		return nil
	}
	for _, k := range *w.aeads.Load() {
		if k.id == id {
			return k.aead
		}
	}
	return nil
}

// addAEAD keeps aead as the sender's for key id, with at most the newest few.
func (w *senderWindow) addAEAD(id uint32, aead cipher.AEAD) {
	w.aeadsMu.Lock()
	defer w.aeadsMu.Unlock()
	old := *w.aeads.Load()
	for _, k := range old {
		if k.id == id {
			return
		}
	}
	next := append([]senderKey{{id, aead}}, old[:min(len(old), 3)]...)
	w.aeads.Store(&next)
}

// addSender returns sender's record, adding one unless maxSenders are known already.
func (s *Sealed) addSender(sender [senderLen]byte) *senderWindow {
	s.sendersMu.Lock()
	defer s.sendersMu.Unlock()
	old := *s.senders.Load()
	if w := old[sender]; w != nil {
		return w
	}
	if len(old) >= maxSenders {
		return nil
	}
	next := make(map[[senderLen]byte]*senderWindow, len(old)+1)
	for k, w := range old {
		next[k] = w
	}
	w := new(senderWindow)
	w.aeads.Store(&[]senderKey{})
	next[sender] = w
	s.senders.Store(&next)
	return w
}

// rejected counts one dropped message and warns at most once a minute: a line per message
// would let whoever floods the transport flood the log too.
func (s *Sealed) rejected(reason string) {
	s.reject(reason)
	n := s.rejections.Add(1)
	now, last := s.now().UnixNano(), s.lastWarn.Load()
	if now-last >= int64(warnPeriod) && s.lastWarn.CompareAndSwap(last, now) {
		s.rejections.Add(-n)
		s.log.Warn("bus: dropped messages that did not open (see parley_bus_rejected_total)", "count", n, "last_reason", reason)
	}
}

// Close implements Bus: it ends this bus's subscriptions and its keyring reloads. The inner
// bus stays open.
func (s *Sealed) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	topics := s.topics
	s.topics = nil
	s.mu.Unlock()
	s.bg.Close()
	var errs []error
	for _, top := range topics {
		top.handlers.Store(&[]*sealedSub{})
		errs = append(errs, top.inner.Unsubscribe())
	}
	return errors.Join(errs...)
}

// Flush is the inner bus's Flush, if it has one (NATS): see NATS.Flush.
func (s *Sealed) Flush(timeout time.Duration) error {
	if f, ok := s.inner.(interface{ Flush(time.Duration) error }); ok {
		return f.Flush(timeout)
	}
	return nil
}

// Healthy is the inner bus's Healthy, if it has one, else nil.
func (s *Sealed) Healthy() error {
	if h, ok := s.inner.(interface{ Healthy() error }); ok {
		return h.Healthy()
	}
	return nil
}

// OnReconnect passes f to the inner bus, if it reports reconnections (NATS).
func (s *Sealed) OnReconnect(f func()) {
	if r, ok := s.inner.(interface{ OnReconnect(func()) }); ok {
		r.OnReconnect(f)
	}
}

type sealedSub struct {
	s       *Sealed
	top     *sealedTopic
	handler func([]byte)
	ended   atomic.Bool
}

// Unsubscribe implements Subscription. The last subscription of a subject ends the inner
// one.
func (u *sealedSub) Unsubscribe() error {
	if u.ended.Swap(true) {
		return nil
	}
	s, top := u.s, u.top
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil
	}
	hs := slices.DeleteFunc(slices.Clone(*top.handlers.Load()), func(h *sealedSub) bool { return h == u })
	top.handlers.Store(&hs)
	if len(hs) > 0 {
		return nil
	}
	delete(s.topics, top.subject)
	return top.inner.Unsubscribe()
}

// replayShards splits each sender's record of counters, so that the delivering goroutines
// (a NATS bus has 16) rarely wait for one another: counter c is in shard c % replayShards.
const replayShards = 16

// windowWords is each shard's record, in 64-bit words: a shard remembers the last
// (windowWords-1)*64 of its counters, so a sender's last ~64,000 messages in all. A
// message further behind the newest seen is dropped as replayed. Messages of one sender
// arrive out of order only by as many as a node's delivery queues hold (16 of 1,024).
const windowWords = 64

type senderWindow struct {
	last    atomic.Int64                // Unix nanoseconds when last heard
	aeads   atomic.Pointer[[]senderKey] // replaced whole, under aeadsMu
	aeadsMu sync.Mutex
	shards  [replayShards]windowShard
}

// senderKey is a key's AEAD for one sender's nonces (senderAEAD).
type senderKey struct {
	id   uint32
	aead cipher.AEAD
}

// windowShard is a sliding bitmap of counters (as in IPsec and WireGuard): top is the
// highest index seen, and bit i%windowBits of bits records index i for the indexes within
// the window below top.
type windowShard struct {
	mu   sync.Mutex // guards the fields below
	seen bool
	top  uint64
	bits [windowWords]uint64
	_    [64]byte // keeps shards on separate cache lines
}

// accept records index i and reports whether it is new and within the window.
func (w *windowShard) accept(i uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen || i > w.top {
		cur, next := w.top/64, i/64
		if !w.seen || next-cur >= windowWords {
			clear(w.bits[:])
		} else {
			for j := cur + 1; j <= next; j++ {
				w.bits[j%windowWords] = 0
			}
		}
		w.top, w.seen = i, true
	} else if w.top-i >= (windowWords-1)*64 {
		return false
	}
	word, bit := (i/64)%windowWords, uint64(1)<<(i%64)
	if w.bits[word]&bit != 0 {
		return false
	}
	w.bits[word] |= bit
	return true
}
