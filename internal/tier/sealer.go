package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/store"
)

// Defaults of Config.
const (
	DefaultHotWindow       = 7 * 24 * time.Hour // the flag's default; Config's zero keeps everything hot
	DefaultSegmentMessages = 1024
	DefaultMinMessages     = 256
	DefaultInterval        = 10 * time.Minute
	DefaultParallel        = 4
	// DefaultGroupRetentionMin is the flag's default shortest retention a group's owner
	// may set; Config's zero sets no lower bound.
	DefaultGroupRetentionMin = time.Hour
)

// Config configures the tier. A zero field but HotWindow and the retentions takes its
// default.
type Config struct {
	// HotWindow is how long a message stays hot; 0 keeps every message hot (the Sealer
	// then only expires messages).
	HotWindow time.Duration
	// CacheBytes bounds the decoded segments kept in memory (DefaultCacheBytes).
	CacheBytes int64
	// SegmentMessages is the most messages a segment holds.
	SegmentMessages int
	// MinMessages is the fewest a segment holds, unless its oldest message has been past
	// the window for a day: a quiet conversation gets one small segment a day, not one a
	// pass.
	MinMessages int
	// Retention is how long a message is kept at all, hot or cold; 0 keeps every message
	// for ever. Reads leave an expired message out at once (Wrap) and each pass deletes
	// what has expired, before it seals.
	Retention time.Duration
	// GroupRetentionMin and GroupRetentionMax bound the retention a group's owner may give
	// the group instead of Retention (store.RetentionPolicy); a GroupRetentionMax of 0 sets
	// no upper bound.
	GroupRetentionMin, GroupRetentionMax time.Duration
	// Interval is the time between passes.
	Interval time.Duration
	// Parallel is how many conversations a pass seals at once. Sealing one segment waits
	// on three fsyncs (the pending entry, the blob, the seal); conversations sealed side
	// by side share the store's group commits and overlap their encoding with the waits.
	Parallel int
	// Rate, when positive, caps the messages a pass seals per second, so that on a busy
	// machine tiering takes a known share of the CPU (about Rate times its cost per
	// message, BenchmarkTierPass's cpu-µs/msg) and the sends keep the rest. 0: no cap.
	Rate int
	// Crash, when set, is called at each step of a segment's sealing with the step's name
	// (StepAdded, StepStored, StepSealed): the crash tests kill the process there.
	Crash func(step string)
}

// pruneBatch is how many sync events one commit of a pass removes. Each commit is one
// request of the store's single writer, which the sends' commits wait behind: a first pass
// over a large store removes millions, and batches of 10,000 held the writer for tens of
// milliseconds at a time; batches of 1,000 interleave with the sends.
const pruneBatch = 1_000

// RetentionPolicy returns the retention c configures.
func (c Config) RetentionPolicy() store.RetentionPolicy {
	return store.RetentionPolicy{Default: c.Retention, GroupMin: c.GroupRetentionMin, GroupMax: c.GroupRetentionMax}
}

// Sealer moves messages older than the hot window into segments, one pass at a time.
type Sealer struct {
	st    store.Store // the backend, not the Store wrapper: it seals hot rows only
	blobs blob.Store
	cfg   Config
	now   func() time.Time
	log   *slog.Logger
	obs   Observer

	paceMu   sync.Mutex
	paceNext time.Time // when the next segment may start, under Config.Rate
}

// Steps of sealing a segment, in order, as Config.Crash names them.
const (
	StepAdded  = "added"  // the index has the pending entry; no blob yet
	StepStored = "stored" // the blob is durable; the messages are still hot
	StepSealed = "sealed" // the hot copies are gone and the entry is sealed
	// Steps of expiring a sealed segment, in order.
	StepExpiring = "expiring" // the entry is pending again, out of reads; the blob is still there
	StepExpired  = "expired"  // the blob and then the entry are gone
	// StepExpiredHot: a batch of expired hot messages is deleted, in one commit.
	StepExpiredHot = "expired-hot"
)

// NewSealer returns a Sealer of st's messages into blobs. now defaults to time.Now.
func NewSealer(st store.Store, blobs blob.Store, cfg Config, now func() time.Time, log *slog.Logger, obs Observer) *Sealer {
	if cfg.SegmentMessages <= 0 {
		cfg.SegmentMessages = DefaultSegmentMessages
	}
	if cfg.MinMessages <= 0 {
		cfg.MinMessages = DefaultMinMessages
	}
	cfg.MinMessages = min(cfg.MinMessages, cfg.SegmentMessages)
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	if obs == nil {
		obs = nopObserver{}
	}
	return &Sealer{st: st, blobs: blobs, cfg: cfg, now: now, log: log, obs: obs}
}

// Run makes a pass every Interval until ctx ends. On a store several nodes share
// (store.Leader) only the node that holds the "tier" lead makes them.
func (s *Sealer) Run(ctx context.Context) {
	store.WhileLeading(ctx, s.st, "tier", time.Second, s.log, func(ctx context.Context) error {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("tier: pass", "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
}

// PassStats is what one pass did.
type PassStats struct {
	Segments, Messages int
	RawBytes, Bytes    int64
	Orphans            int // blobs of pending entries a crashed pass left, deleted
	Conflicts          int // segments dropped because a message changed while sealing
	// Expired is how many messages retention deleted, ExpiredSegments how many sealed
	// segments among them (whole: one partly kept stays until all of it expires).
	Expired, ExpiredSegments int
}

// Pass deletes every conversation's messages past its retention, then seals those older
// than the hot window, but each conversation's newest message (conversation lists show
// it), into segments. It first removes what a crashed pass left (pending entries and their
// blobs, those of an expiry included) and the sync events that name the messages it is
// about to seal, so that no sync, snapshot or push reads a cold message.
func (s *Sealer) Pass(ctx context.Context) (PassStats, error) {
	var st PassStats
	err := s.pass(ctx, &st)
	s.obs.TierPass(st.Messages, err != nil)
	return st, err
}

func (s *Sealer) pass(ctx context.Context, st *PassStats) error {
	if err := s.dropPending(ctx, st); err != nil {
		return err
	}
	now := s.now()
	cutoff := now.Add(-s.cfg.HotWindow).UnixMilli()
	for s.cfg.HotWindow > 0 {
		n, err := s.st.PruneEvents(ctx, cutoff, pruneBatch)
		if err != nil {
			return fmt.Errorf("prune events before %d: %w", cutoff, err)
		}
		if n < pruneBatch {
			break
		}
	}
	after := ""
	for {
		var ids []string
		if err := s.st.View(ctx, func(tx store.ReadTx) (err error) {
			ids, err = tx.ConversationIDs(ctx, after, 500)
			return err
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		for _, id := range ids { // every pass: a group may have its own retention whatever the operator's
			if err := s.expireConversation(ctx, id, now, st); err != nil {
				return fmt.Errorf("expire conversation %s: %w", id, err)
			}
		}
		if s.cfg.HotWindow > 0 {
			if err := s.sealAll(ctx, ids, cutoff, st); err != nil {
				return err
			}
		}
		after = ids[len(ids)-1]
	}
}

// sealAll seals the conversations ids, Config.Parallel at a time, adding to st; it
// returns the first error, after the conversations started have ended.
func (s *Sealer) sealAll(ctx context.Context, ids []string, cutoff int64, st *PassStats) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	for range min(s.cfg.Parallel, len(ids)) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				var one PassStats
				err := s.sealConversation(ctx, ids[i], cutoff, &one)
				mu.Lock()
				st.add(one)
				mu.Unlock()
				if err != nil {
					cancel(fmt.Errorf("conversation %s: %w", ids[i], err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (st *PassStats) add(o PassStats) {
	st.Segments += o.Segments
	st.Messages += o.Messages
	st.RawBytes += o.RawBytes
	st.Bytes += o.Bytes
	st.Orphans += o.Orphans
	st.Conflicts += o.Conflicts
}

// dropPending deletes the blob and the entry of every pending segment: only a pass makes
// them, one pass runs at a time, and one that ended left none it still needed.
func (s *Sealer) dropPending(ctx context.Context, st *PassStats) error {
	for {
		var segs []store.Segment
		if err := s.st.View(ctx, func(tx store.ReadTx) (err error) {
			segs, err = tx.PendingSegments(ctx, 100)
			return err
		}); err != nil || len(segs) == 0 {
			return err
		}
		for _, seg := range segs {
			if err := s.drop(ctx, seg.Key); err != nil {
				return err
			}
			st.Orphans++
		}
	}
}

// drop removes a pending segment: its blob first, so that an entry outlives its blob and
// never the other way round.
func (s *Sealer) drop(ctx context.Context, key string) error {
	if err := s.blobs.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete segment %s: %w", key, err)
	}
	err := s.st.Update(ctx, func(tx store.Tx) error { return tx.DeleteSegment(ctx, key) })
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// expireConversation deletes convID's messages created before its cutoff at now
// (store.ConversationCutoff): first its sealed segments wholly past it, oldest first, then
// its hot messages past it, a batch at a time. A segment only partly past it stays, reads
// leaving out its expired part, until a later pass finds all of it expired; every hot
// message is newer than it, so none goes meanwhile. now is also when the attachments of
// what goes become idle.
func (s *Sealer) expireConversation(ctx context.Context, convID string, now time.Time, st *PassStats) error {
	var cutoff int64
	err := s.st.View(ctx, func(tx store.ReadTx) error {
		c, err := tx.Conversation(ctx, convID)
		cutoff = store.ConversationCutoff(c, s.cfg.RetentionPolicy(), now)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil || cutoff == 0 { // 0: kept for ever
		return err
	}
	at := now.UnixMilli()
	for {
		var segs []store.Segment
		if err := s.st.View(ctx, func(tx store.ReadTx) (err error) {
			segs, err = tx.Segments(ctx, convID, 0, 8)
			return err
		}); err != nil {
			return err
		}
		n := 0
		for n < len(segs) && segs[n].LastTS < cutoff {
			n++
		}
		for _, seg := range segs[:n] {
			if err := s.expireSegment(ctx, seg, at, st); err != nil {
				return err
			}
		}
		if n < len(segs) {
			return nil // partly kept
		}
		if len(segs) == 0 {
			break
		}
	}
	for {
		var through int64
		var more bool
		if err := s.st.View(ctx, func(tx store.ReadTx) error {
			ms, err := tx.Messages(ctx, convID, store.MessageRange{Limit: s.cfg.SegmentMessages})
			n := 0
			for n < len(ms) && ms[n].CreatedAt < cutoff {
				n++
			}
			if n > 0 {
				through, more = ms[n-1].Seq, n == len(ms)
			}
			return err
		}); err != nil || through == 0 {
			return err
		}
		var n int
		if err := s.st.Update(ctx, func(tx store.Tx) (err error) {
			n, err = tx.ExpireMessages(ctx, convID, through, at)
			return err
		}); err != nil {
			return err
		}
		s.step(StepExpiredHot)
		st.Expired += n
		s.obs.MessagesExpired(n)
		if !more {
			return nil
		}
	}
}

// expireSegment deletes the sealed segment seg, whose every message has expired: in one
// commit its entry goes back to pending (out of reads) with its overlay dropped and its
// attachments uncounted, then its blob is deleted, then its entry (drop). A crash after the
// first step leaves a pending entry, which the next pass drops as it drops a crashed
// seal's: no blob outlives the index's naming it by more than a pass.
func (s *Sealer) expireSegment(ctx context.Context, seg store.Segment, at int64, st *PassStats) error {
	ms, err := fetch(ctx, s.blobs, seg) // only the blob knows which messages carry an attachment
	if err != nil {
		return err
	}
	var attached []store.Message
	for _, m := range ms {
		if m.AttachmentID != "" {
			attached = append(attached, m)
		}
	}
	err = s.st.Update(ctx, func(tx store.Tx) error { return tx.ExpireSegment(ctx, seg.Key, attached, at) })
	if errors.Is(err, store.ErrNotFound) {
		return nil // expired meanwhile: on a store several nodes share, by a pass that lost its lead
	}
	if err != nil {
		return err
	}
	s.step(StepExpiring)
	if err := s.drop(ctx, seg.Key); err != nil {
		return err
	}
	s.step(StepExpired)
	st.ExpiredSegments++
	st.Expired += seg.Count
	s.obs.MessagesExpired(seg.Count)
	return nil
}

// sealConversation seals convID's hot messages older than cutoff, a segment at a time.
func (s *Sealer) sealConversation(ctx context.Context, convID string, cutoff int64, st *PassStats) error {
	for {
		var ms []store.Message
		if err := s.st.View(ctx, func(tx store.ReadTx) error {
			c, err := tx.Conversation(ctx, convID)
			if err != nil {
				return err
			}
			if ok, err := s.due(ctx, tx, c, cutoff); !ok || err != nil {
				return err
			}
			ms, err = tx.Messages(ctx, convID, store.MessageRange{Limit: s.cfg.SegmentMessages})
			n := 0
			for n < len(ms) && ms[n].CreatedAt < cutoff && ms[n].Seq < c.MaxSeq {
				n++
			}
			ms = ms[:n]
			return err
		}); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil // deleted meanwhile
			}
			return err
		}
		day := int64(24 * time.Hour / time.Millisecond)
		if len(ms) == 0 || len(ms) < s.cfg.MinMessages && ms[0].CreatedAt >= cutoff-day {
			return nil
		}
		if err := s.pace(ctx, len(ms)); err != nil {
			return err
		}
		if err := s.seal(ctx, ms, st); err != nil {
			return err
		}
		if len(ms) < s.cfg.SegmentMessages {
			return nil
		}
	}
}

// due reports whether conversation c has a segment's worth of messages to seal, with two
// point reads rather than a segment's worth of rows: a pass visits every conversation, and
// most have nothing to seal. It mirrors sealConversation's rule: the oldest hot message is
// past the cutoff and not the newest, and either it has been past it for a day or the
// MinMessages-th hot message is past it too.
func (s *Sealer) due(ctx context.Context, tx store.ReadTx, c store.Conversation, cutoff int64) (bool, error) {
	first, err := tx.Messages(ctx, c.ID, store.MessageRange{Limit: 1})
	if err != nil || len(first) == 0 || first[0].CreatedAt >= cutoff || first[0].Seq >= c.MaxSeq {
		return false, err
	}
	if first[0].CreatedAt < cutoff-int64(24*time.Hour/time.Millisecond) {
		return true, nil
	}
	seq := first[0].Seq + int64(s.cfg.MinMessages) - 1
	if seq >= c.MaxSeq {
		return false, nil
	}
	m, err := tx.Message(ctx, c.ID, seq)
	if err != nil {
		return false, err
	}
	return m.CreatedAt < cutoff, nil
}

// pace waits until a segment of n messages keeps the pass within Config.Rate, by the real
// clock (not now, which tests stop): each segment reserves n/Rate seconds after the last.
func (s *Sealer) pace(ctx context.Context, n int) error {
	if s.cfg.Rate <= 0 {
		return nil
	}
	s.paceMu.Lock()
	now := time.Now()
	if s.paceNext.Before(now) {
		s.paceNext = now
	}
	wait := s.paceNext.Sub(now)
	s.paceNext = s.paceNext.Add(time.Duration(n) * time.Second / time.Duration(s.cfg.Rate))
	s.paceMu.Unlock()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// seal writes ms as one segment: the pending entry, the durable blob, then in one commit
// the hot copies removed and the entry sealed (docs/design.md, "History tiers", has why a
// crash between any two steps loses and duplicates nothing).
func (s *Sealer) seal(ctx context.Context, ms []store.Message, st *PassStats) error {
	b, raw, err := encode(ms)
	if err != nil {
		return err
	}
	first, last := ms[0], ms[len(ms)-1]
	seg := store.Segment{ConvID: first.ConvID, FirstSeq: first.Seq, LastSeq: last.Seq,
		FirstTS: first.CreatedAt, LastTS: last.CreatedAt, Key: segmentKey(first.ConvID, first.Seq, last.Seq),
		Count: len(ms), Bytes: int64(len(b)), RawBytes: int64(raw), CreatedAt: s.now().UnixMilli()}
	recalled := 0
	for i := range ms {
		if ms[i].Recalled {
			recalled++
		}
	}
	if err := s.st.Update(ctx, func(tx store.Tx) error { return tx.AddSegment(ctx, seg) }); err != nil {
		return err
	}
	s.step(StepAdded)
	if err := s.blobs.Put(ctx, seg.Key, bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("store segment %s: %w", seg.Key, err)
	}
	s.step(StepStored)
	err = s.st.Update(ctx, func(tx store.Tx) error { return tx.SealSegment(ctx, seg.Key, recalled) })
	if errors.Is(err, store.ErrConflict) {
		st.Conflicts++
		return s.drop(ctx, seg.Key) // a message was recalled meanwhile: sealed again next pass
	}
	if err != nil {
		return err
	}
	s.step(StepSealed)
	st.Segments++
	st.Messages += len(ms)
	st.RawBytes += int64(raw)
	st.Bytes += int64(len(b))
	s.obs.SegmentSealed(len(ms), int64(raw), int64(len(b)))
	return nil
}

func (s *Sealer) step(name string) {
	if s.cfg.Crash != nil {
		s.cfg.Crash(name)
	}
}
