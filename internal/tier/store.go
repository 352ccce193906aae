package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/store"
)

// Store is a store.Store whose transactions read cold messages as if they were hot:
// Message, Messages and MessageAt answer from the sealed segments (through a cache) and
// their overlay where the backend has no hot row, and RecallMessage of a cold message
// writes its overlay. Everything else is the backend's. It costs nothing on a read the
// hot messages answer whole: a page goes to the segments only when the hot rows it got do
// not reach down to what it asked for.
//
// Reading a cold segment in an Update (a recall of a cold message) holds the backend's
// writer for the blob read when the segment is not cached; only a recall window longer
// than the hot window makes that possible.
type Store struct {
	store.Store
	cache *cache
}

// Wrap returns st reading its cold tier from blobs, with a segment cache of cacheBytes
// (DefaultCacheBytes if 0). A store with no segment answers as st does.
//
// Every read it completes also leaves out the messages past their conversation's
// retention (store.ConversationRetention under cfg.RetentionPolicy) on now's clock, hot or
// cold, before the retention pass deletes them: Message answers ErrNotFound, Messages and
// MessageAt answer from the first message kept, and a "message" event of Events has no
// Message, as one the pass already deleted. That is the one place expiry is decided for
// reads, so that history, jumps, receipts, recalls and sync agree. A read reads the
// conversation for its retention only when a message it returns (or the time it asks) is
// older than the shortest retention any conversation can have (RetentionPolicy.KeptAfter).
func Wrap(st store.Store, blobs blob.Store, cfg Config, now func() time.Time, obs Observer) *Store {
	if obs == nil {
		obs = nopObserver{}
	}
	if now == nil {
		now = time.Now
	}
	c := newCache(blobs, cfg.CacheBytes, obs)
	c.policy, c.now = cfg.RetentionPolicy(), now
	return &Store{Store: st, cache: c}
}

// Unwrap returns the backend, for the capabilities a caller asks of it by type assertion
// (store.Leader, store.SecretKeeper).
func (s *Store) Unwrap() store.Store { return s.Store }

// View runs fn in the backend's read-only transaction, with cold reads.
func (s *Store) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	return s.Store.View(ctx, func(tx store.ReadTx) error { return fn(readTx{tx, s.cache}) })
}

// Update runs fn in the backend's read-write transaction, with cold reads.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(writeTx{tx, s.cache}) })
}

type readTx struct {
	store.ReadTx
	c *cache
}

// Hot returns the engine's transaction, without cold reads (store.HotOnly).
func (t readTx) Hot() store.ReadTx { return t.ReadTx }

func (t readTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	return t.c.kept(ctx, t.ReadTx, convID, seq)
}

func (t readTx) Messages(ctx context.Context, convID string, r store.MessageRange) ([]store.Message, error) {
	return t.c.keptPage(ctx, t.ReadTx, convID, r)
}

func (t readTx) MessageAt(ctx context.Context, convID string, ts int64) (int64, error) {
	return t.c.keptAt(ctx, t.ReadTx, convID, ts)
}

func (t readTx) Events(ctx context.Context, userID string, after int64, limit int) ([]store.Event, error) {
	es, err := t.ReadTx.Events(ctx, userID, after, limit)
	if err != nil {
		return nil, err
	}
	return t.c.keptEvents(ctx, t.ReadTx, es)
}

type writeTx struct {
	store.Tx
	c *cache
}

// Hot returns the engine's transaction, without cold reads (store.HotOnly).
func (t writeTx) Hot() store.ReadTx { return t.Tx }

func (t writeTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	return t.c.kept(ctx, t.Tx, convID, seq)
}

func (t writeTx) Messages(ctx context.Context, convID string, r store.MessageRange) ([]store.Message, error) {
	return t.c.keptPage(ctx, t.Tx, convID, r)
}

func (t writeTx) MessageAt(ctx context.Context, convID string, ts int64) (int64, error) {
	return t.c.keptAt(ctx, t.Tx, convID, ts)
}

func (t writeTx) Events(ctx context.Context, userID string, after int64, limit int) ([]store.Event, error) {
	es, err := t.Tx.Events(ctx, userID, after, limit)
	if err != nil {
		return nil, err
	}
	return t.c.keptEvents(ctx, t.Tx, es)
}

// RecallMessage recalls a hot message as the backend does, and a cold one by writing its
// recalled version into the overlay (which uncounts its attachment once).
func (t writeTx) RecallMessage(ctx context.Context, convID string, seq, at int64) error {
	err := t.Tx.RecallMessage(ctx, convID, seq, at)
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	m, err := t.c.cold(ctx, t.Tx, convID, seq)
	if err != nil || m.Recalled {
		return err
	}
	m.Recalled, m.Content, m.Extra = true, nil, nil
	return t.Tx.PutOverlay(ctx, m, at)
}

// cutoff returns the Unix ms before which convID's messages have expired (0: none), for a
// read whose oldest message, or the time it asks, is oldest: it reads the conversation
// only when oldest is before what every conversation keeps.
func (c *cache) cutoff(ctx context.Context, tx store.ReadTx, convID string, oldest int64) (int64, error) {
	now := c.now()
	if oldest >= c.policy.KeptAfter(now) {
		return 0, nil
	}
	return c.conversationCutoff(ctx, tx, convID, now)
}

// conversationCutoff is convID's store.ConversationCutoff at now; 0 for a conversation
// that does not exist (the read it serves answers as for any other).
func (c *cache) conversationCutoff(ctx context.Context, tx store.ReadTx, convID string, now time.Time) (int64, error) {
	conv, err := tx.Conversation(ctx, convID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return store.ConversationCutoff(conv, c.policy, now), nil
}

// kept is Message without expired messages.
func (c *cache) kept(ctx context.Context, tx store.ReadTx, convID string, seq int64) (store.Message, error) {
	m, err := c.message(ctx, tx, convID, seq)
	if err != nil {
		return m, err
	}
	cutoff, err := c.cutoff(ctx, tx, convID, m.CreatedAt)
	if err != nil {
		return store.Message{}, err
	}
	if m.CreatedAt < cutoff {
		return store.Message{}, fmt.Errorf("tier: message %s/%d has expired: %w", convID, seq, store.ErrNotFound)
	}
	return m, nil
}

// keptAt is MessageAt without expired messages: at ts or the cutoff, whichever is later.
func (c *cache) keptAt(ctx context.Context, tx store.ReadTx, convID string, ts int64) (int64, error) {
	cutoff, err := c.cutoff(ctx, tx, convID, ts)
	if err != nil {
		return 0, err
	}
	return c.messageAt(ctx, tx, convID, max(ts, cutoff))
}

// keptPage is Messages without expired messages. It costs nothing while the page's first
// message is kept; else the first kept seq (MessageAt at the cutoff, O(log n)) becomes the
// range's floor and the page is read again from there, once.
func (c *cache) keptPage(ctx context.Context, tx store.ReadTx, convID string, r store.MessageRange) ([]store.Message, error) {
	ms, err := c.page(ctx, tx, convID, r)
	if err != nil || len(ms) == 0 {
		return ms, err
	}
	cutoff, err := c.cutoff(ctx, tx, convID, ms[0].CreatedAt)
	if err != nil {
		return nil, err
	}
	if ms[0].CreatedAt >= cutoff {
		return ms, nil
	}
	first, err := c.messageAt(ctx, tx, convID, cutoff)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // every message has expired
	}
	if err != nil {
		return nil, err
	}
	r.Floor = max(r.Floor, first-1)
	return c.page(ctx, tx, convID, r)
}

// keptEvents drops the Message of every "message" event of es whose message has expired,
// reading each conversation of an old enough message once.
func (c *cache) keptEvents(ctx context.Context, tx store.ReadTx, es []store.Event) ([]store.Event, error) {
	now := c.now()
	kept := c.policy.KeptAfter(now)
	var cutoffs map[string]int64
	for i := range es {
		m := es[i].Message
		if m == nil || m.CreatedAt >= kept {
			continue
		}
		cutoff, ok := cutoffs[m.ConvID]
		if !ok {
			var err error
			if cutoff, err = c.conversationCutoff(ctx, tx, m.ConvID, now); err != nil {
				return nil, err
			}
			if cutoffs == nil {
				cutoffs = make(map[string]int64)
			}
			cutoffs[m.ConvID] = cutoff
		}
		if m.CreatedAt < cutoff {
			es[i].Message = nil
		}
	}
	return es, nil
}

// message is Message: the hot row, else the cold message.
func (c *cache) message(ctx context.Context, tx store.ReadTx, convID string, seq int64) (store.Message, error) {
	m, err := tx.Message(ctx, convID, seq)
	if !errors.Is(err, store.ErrNotFound) {
		return m, err
	}
	return c.cold(ctx, tx, convID, seq)
}

// cold returns the cold message (convID, seq): its overlay if it has one, else its
// segment's copy; ErrNotFound when no sealed segment holds it.
func (c *cache) cold(ctx context.Context, tx store.ReadTx, convID string, seq int64) (store.Message, error) {
	if seq < 1 {
		return store.Message{}, store.ErrNotFound
	}
	if ov, err := tx.Overlays(ctx, convID, seq, seq); err != nil || len(ov) == 1 {
		if err != nil {
			return store.Message{}, err
		}
		return ov[0], nil
	}
	segs, err := tx.Segments(ctx, convID, seq, 1)
	if err != nil {
		return store.Message{}, err
	}
	if len(segs) == 0 || segs[0].FirstSeq > seq {
		return store.Message{}, store.ErrNotFound
	}
	ms, err := c.messages(ctx, segs[0])
	if err != nil {
		return store.Message{}, err
	}
	return ms[seq-segs[0].FirstSeq], nil
}

// page is Messages. The hot messages are a gapless run that ends at the conversation's
// newest, so the backend's answer is whole unless it stops short of the low end of the
// range asked: then the cold messages below its first (or below BeforeSeq, or all of the
// range when it found none) complete it. The sealed segments are a gapless run too, but
// for a prefix retention deleted: a page from a seq in it starts at the first segment.
func (c *cache) page(ctx context.Context, tx store.ReadTx, convID string, r store.MessageRange) ([]store.Message, error) {
	hot, err := tx.Messages(ctx, convID, r)
	if err != nil || r.Limit <= 0 {
		return hot, err
	}
	if r.BeforeSeq > 0 {
		if len(hot) == r.Limit {
			return hot, nil
		}
		below := r.BeforeSeq
		if len(hot) > 0 {
			below = hot[0].Seq
		}
		from := max(r.Floor+1, below-int64(r.Limit-len(hot)))
		if from >= below {
			return hot, nil
		}
		cold, err := c.coldRange(ctx, tx, convID, from, below-1)
		if err != nil {
			return nil, err
		}
		return append(cold, hot...), nil
	}
	from := max(r.AfterSeq, r.Floor) + 1
	if len(hot) > 0 && hot[0].Seq == from {
		return hot, nil
	}
	to := int64(1 << 62)
	if len(hot) > 0 {
		to = hot[0].Seq - 1
	}
	segs, err := tx.Segments(ctx, convID, from, 1)
	if err != nil {
		return nil, err
	}
	if len(segs) > 0 && segs[0].FirstSeq > from {
		from = segs[0].FirstSeq // the seqs below it are gone: retention deleted their segments
	}
	cold, err := c.coldRange(ctx, tx, convID, from, min(to, from+int64(r.Limit)-1))
	if err != nil {
		return nil, err
	}
	out := append(cold, hot...)
	return out[:min(len(out), r.Limit)], nil
}

// coldRange returns the cold messages of convID with from <= seq <= to, ascending, each
// its overlay's version where it has one.
func (c *cache) coldRange(ctx context.Context, tx store.ReadTx, convID string, from, to int64) ([]store.Message, error) {
	var out []store.Message
scan:
	for from <= to {
		segs, err := tx.Segments(ctx, convID, from, 8)
		if err != nil {
			return nil, err
		}
		if len(segs) == 0 {
			break
		}
		for _, seg := range segs {
			if seg.FirstSeq > to {
				// Past the range: what it asked below this segment is gone (retention
				// deleted the segments before it), and asking again from the same seq
				// would find this one again for ever.
				break scan
			}
			ms, err := c.messages(ctx, seg)
			if err != nil {
				return nil, err
			}
			lo, hi := max(from, seg.FirstSeq), min(to, seg.LastSeq)
			if lo <= hi {
				out = append(out, ms[lo-seg.FirstSeq:hi-seg.FirstSeq+1]...)
			}
			from = seg.LastSeq + 1
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	out = slices.Clip(out) // the cache's slice: appending to it must copy
	ov, err := tx.Overlays(ctx, convID, out[0].Seq, out[len(out)-1].Seq)
	if err != nil || len(ov) == 0 {
		return out, err
	}
	out = slices.Clone(out)
	for _, m := range ov {
		if i := m.Seq - out[0].Seq; i >= 0 && i < int64(len(out)) && out[i].Seq == m.Seq {
			out[i] = m
		}
	}
	return out, nil
}

// messageAt is MessageAt: the segment index by time finds the one cold segment to look
// in, and a bisection of it the message; later than every cold message, the backend's
// bisection of the hot ones answers.
func (c *cache) messageAt(ctx context.Context, tx store.ReadTx, convID string, ts int64) (int64, error) {
	seg, err := tx.SegmentAtTime(ctx, convID, ts)
	if errors.Is(err, store.ErrNotFound) {
		return tx.MessageAt(ctx, convID, ts)
	}
	if err != nil {
		return 0, err
	}
	ms, err := c.messages(ctx, seg)
	if err != nil {
		return 0, err
	}
	i := sort.Search(len(ms), func(i int) bool { return ms[i].CreatedAt >= ts })
	return ms[min(i, len(ms)-1)].Seq, nil
}
