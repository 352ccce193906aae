package chat

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// receiptPushes pushes a group's read counts to the senders of its messages as members'
// positions move, so that a client shows "read by N of M" without polling receipts
// (docs/protocol.md section 7.2). It remembers, per group, the newest seqs each sender sent
// through this process (at most protocol.MaxReceiptsPushed) and the counts last pushed for
// them; a change of positions schedules a push of the conversation, at most one a second:
// the first change pushes at once, the changes within the second after it go in one push at
// its end. Counts come from live.ReadCounts, in O(log M) each. What it holds is lost with the
// process: after a restart a sender's older messages get no push until they send again
// (their client can still ask GET receipts).
//
// Every send and position change passes through it, so it is sharded by conversation like
// live.ReadCounts: sends to different conversations share no lock.
type receiptPushes struct {
	seed   maphash.Seed
	shards [pushShards]pushShard
	// onHold, if set (on one of several nodes), is told when a group's senders are held and
	// when they are forgotten, so that the node hears of the positions the others commit
	// (live.Cluster). It is called with the shard's lock held.
	onHold func(convID string, on bool)
}

// pushShards is how many shards receiptPushes has, as many as live.ReadCounts.
const pushShards = 64

type pushShard struct {
	mu    sync.Mutex // guards convs and everything they hold
	convs map[string]*convPushes
}

// convPushes is what receiptPushes holds for one group.
type convPushes struct {
	sent     map[string][]int64 // sender -> their newest seqs, ascending
	pushed   map[int64]protocol.Receipts
	last     time.Time // of the latest push
	pending  bool      // a push is scheduled (now, or at the end of the second)
	changed  bool      // positions moved since the latest push
	inFlight bool      // a push is being computed; a change meanwhile marks changed
}

// maxPushedConvs bounds the groups a shard holds; past it, arbitrary ones are forgotten (their
// senders get pushes again after their next message).
const maxPushedConvs = 4096

// receiptsInterval is the least time between two pushes of one conversation.
const receiptsInterval = time.Second

func newReceiptPushes() *receiptPushes {
	r := &receiptPushes{seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].convs = make(map[string]*convPushes)
	}
	return r
}

func (r *receiptPushes) shard(convID string) *pushShard {
	return &r.shards[maphash.String(r.seed, convID)%pushShards]
}

// messageSent records, after its commit, that sender sent seq in convID, and that the
// sender's positions moved to it.
func (s *Service) messageSent(m store.Message) {
	s.positionsMoved(m.ConvID, m.SenderID, m.Seq, m.Seq)
	if !live.IsGroupID(m.ConvID) {
		return
	}
	r := s.receipts.shard(m.ConvID)
	r.mu.Lock()
	c := r.convs[m.ConvID]
	if c == nil {
		if len(r.convs) >= maxPushedConvs {
			for id := range r.convs {
				r.forgetLocked(s.receipts, id)
				break
			}
		}
		c = &convPushes{sent: make(map[string][]int64), pushed: make(map[int64]protocol.Receipts)}
		r.convs[m.ConvID] = c
		if s.receipts.onHold != nil {
			s.receipts.onHold(m.ConvID, true)
		}
	}
	seqs := c.sent[m.SenderID]
	i, found := slices.BinarySearch(seqs, m.Seq) // sends commit in order, but may get here in another
	if !found {
		seqs = slices.Insert(seqs, i, m.Seq)
		if len(seqs) > protocol.MaxReceiptsPushed {
			delete(c.pushed, seqs[0])
			seqs = seqs[1:]
		}
		c.sent[m.SenderID] = seqs
	}
	r.mu.Unlock()
	s.countsChanged(m.ConvID)
}

// countsChanged schedules a push of convID's counts, if its senders are known.
func (s *Service) countsChanged(convID string) {
	r := s.receipts.shard(convID)
	r.mu.Lock()
	c := r.convs[convID]
	if c == nil {
		r.mu.Unlock()
		return
	}
	c.changed = true
	if c.pending || c.inFlight {
		r.mu.Unlock()
		return
	}
	c.pending = true // one push at a time is scheduled
	wait := c.last.Add(receiptsInterval).Sub(s.now())
	r.mu.Unlock()
	if wait > 0 {
		s.afterFunc(wait, func() { s.bg.Do(func(ctx context.Context) { s.pushReceipts(ctx, convID) }) })
		return
	}
	// Not on the caller's time: a send's ack, a batch of reads.
	s.bg.Go(func(ctx context.Context) { s.pushReceipts(ctx, convID) })
}

// pushReceipts pushes to each sender of convID the counts of their messages that changed
// since the last push.
func (s *Service) pushReceipts(ctx context.Context, convID string) {
	r := s.receipts.shard(convID)
	r.mu.Lock()
	c := r.convs[convID]
	if c == nil || c.inFlight {
		r.mu.Unlock()
		return
	}
	c.pending, c.changed, c.inFlight, c.last = false, false, true, s.now()
	sent := make(map[string][]int64, len(c.sent))
	for u, seqs := range c.sent {
		// On one node a sender with no connection here has nobody to push to: its counts
		// are not worth building (a large group's first build reads every member). Its
		// next push, once connected, carries whatever changed since the last one. On
		// several nodes it may be connected elsewhere, so every sender counts.
		if s.cluster == nil && !s.hub.Online(u) {
			continue
		}
		sent[u] = slices.Clone(seqs)
	}
	if len(sent) == 0 {
		c.inFlight = false
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	counts, err := s.receiptCounts(ctx, convID, sent)
	if err != nil && !errors.Is(err, ErrNotFound) {
		s.log.Warn("receipts push", "conv", convID, "err", err)
	}

	r.mu.Lock()
	c.inFlight = false
	var frames []receiptFrame
	for u, rs := range counts {
		var changed []protocol.Receipts
		for i := len(rs) - 1; i >= 0; i-- { // newest first
			if old, ok := c.pushed[rs[i].Seq]; !ok || old != rs[i] {
				c.pushed[rs[i].Seq] = rs[i]
				changed = append(changed, rs[i])
			}
		}
		if len(changed) > 0 {
			frames = append(frames, receiptFrame{u, changed})
		}
	}
	for u := range sent {
		if _, ok := counts[u]; (!ok && err == nil) || errors.Is(err, ErrNotFound) {
			c.forgetSender(u) // no longer a member, or the group is gone
		}
	}
	again := c.changed
	if len(c.sent) == 0 && r.convs[convID] == c {
		r.forgetLocked(s.receipts, convID) // nobody left to push to
		again = false
	}
	r.mu.Unlock()

	for _, f := range frames {
		s.pushReceiptsTo(f.sender, convID, f.receipts)
	}
	if again {
		s.countsChanged(convID) // changes that came while this push was computed
	}
}

// forgetSender drops what c holds of sender's messages. The shard's lock must be held.
func (c *convPushes) forgetSender(sender string) {
	for _, seq := range c.sent[sender] {
		delete(c.pushed, seq)
	}
	delete(c.sent, sender)
}

// forgetLocked drops what r holds of convID. r.mu must be held.
func (r *pushShard) forgetLocked(rp *receiptPushes, convID string) {
	delete(r.convs, convID)
	if rp.onHold != nil {
		rp.onHold(convID, false)
	}
}

// membersLeft drops the senders in left from convID's receipts pushes: they left the
// group, and are pushed nothing more of it.
func (s *Service) membersLeft(convID string, left []string) {
	if len(left) == 0 {
		return
	}
	r := s.receipts.shard(convID)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.convs[convID]
	if c == nil {
		return
	}
	for _, u := range left {
		c.forgetSender(u)
	}
	if len(c.sent) == 0 {
		r.forgetLocked(s.receipts, convID)
	}
}

type receiptFrame struct {
	sender   string
	receipts []protocol.Receipts
}

// receiptCounts returns, for each sender of sent who is still a member, the counts of
// those of their seqs they can see (above their visible_from), ascending, as Receipts
// answers them without readers. It builds convID's counts from its members if they are
// not held, as Receipts does.
func (s *Service) receiptCounts(ctx context.Context, convID string, sent map[string][]int64) (map[string][]protocol.Receipts, error) {
	out := make(map[string][]protocol.Receipts, len(sent))
	var built []store.Member
	install := s.counts.StartBuild(convID)
	defer func() { install(built) }()
	s.AwaitSubscriptions() // and other nodes' raises after the snapshot reach it
	err := s.view(ctx, "receipts push", func(tx store.ReadTx) error {
		c, err := loadConv(ctx, tx, convID)
		if err != nil {
			return err
		}
		for u, seqs := range sent {
			m, err := tx.Member(ctx, convID, u)
			if errors.Is(err, store.ErrNotFound) {
				continue
			} else if err != nil {
				return err
			}
			for _, seq := range seqs {
				if seq <= visibleFrom(m) || seq > c.MaxSeq {
					continue
				}
				members, read, delivered, ok := s.counts.Count(convID, u, seq)
				if !ok {
					if built == nil {
						if built, err = tx.Members(ctx, convID); err != nil {
							return err
						}
					}
					r := countReceipts(c, u, seq, built)
					members, read, delivered = r.MemberCount, r.ReadCount, r.DeliveredCount
				}
				out[u] = append(out[u], protocol.Receipts{Seq: seq, MemberCount: members, ReadCount: read, DeliveredCount: delivered})
			}
		}
		return nil
	})
	return out, err
}
