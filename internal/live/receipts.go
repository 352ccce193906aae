package live

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tasks"
	"github.com/parleychat/parley/protocol"
)

// ReceiptPushes pushes a group's read counts to the senders of its messages as members'
// positions move, so that a client shows "read by N of M" without polling receipts
// (docs/protocol.md section 7.2). It remembers, per group, the newest seqs each sender sent
// through this process (at most protocol.MaxReceiptsPushed) and the counts last pushed for
// them; a change of positions schedules a push of the conversation, at most one a second:
// the first change pushes at once, the changes within the second after it go in one push at
// its end. Counts come from ReadCounts (through the ReceiptCounter), in O(log M) each. What it holds is lost with the
// process: after a restart a sender's older messages get no push until they send again
// (their client can still ask GET receipts).
//
// Every send and position change passes through it, so it is sharded by conversation like
// ReadCounts: sends to different conversations share no lock.
type ReceiptPushes struct {
	seed   maphash.Seed
	shards [countShards]pushShard
	// onHold, if set (on one of several nodes), is told when a group's senders are held and
	// when they are forgotten, so that the node hears of the positions the others commit
	// (Cluster). It is called with the shard's lock held.
	onHold func(convID string, on bool)

	counter   ReceiptCounter
	hub       *hub.Hub
	cluster   *Cluster     // nil on a single node
	tasks     *tasks.Group // owns the pushes; Close waits for them
	now       func() time.Time
	afterFunc func(time.Duration, func())
	log       *slog.Logger
}

// ReceiptCounter counts what a receipts push carries; chat.Service provides it, with the
// rules of who sees which of a group's messages. It is called from ReceiptPushes' tasks,
// concurrently for different conversations.
type ReceiptCounter interface {
	// ReceiptCounts returns, for each sender of sent (sender -> seqs, ascending) who is
	// still a member of convID, the counts of those of their seqs they can see, ascending,
	// as GET receipts answers them without readers. An error wrapping ErrNoConversation
	// says that convID is gone, or the caller no longer in it: its senders are forgotten.
	ReceiptCounts(ctx context.Context, convID string, sent map[string][]int64) (map[string][]protocol.Receipts, error)
}

// ErrNoConversation is what a ReceiptCounter's error wraps for a conversation that is gone.
var ErrNoConversation = errors.New("live: no such conversation")

// ReceiptPushesOptions are the dependencies of ReceiptPushes; all are required but Cluster,
// OnHold, Now, AfterFunc and Logger.
type ReceiptPushesOptions struct {
	Counter ReceiptCounter
	Hub     *hub.Hub
	Cluster *Cluster     // the other nodes; nil on a single node
	Tasks   *tasks.Group // owns the pushes: its owner's Close waits for them
	// OnHold, if not nil (on one of several nodes), is told when a group's senders are
	// held and when they are forgotten.
	OnHold    func(convID string, on bool)
	Now       func() time.Time            // default time.Now
	AfterFunc func(time.Duration, func()) // runs f once d has passed on Now's clock; default time.AfterFunc
	Logger    *slog.Logger                // default slog.Default()
}

type pushShard struct {
	mu    sync.Mutex // guards convs and everything they hold
	convs map[string]*convPushes
}

// convPushes is what ReceiptPushes holds for one group.
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

// NewReceiptPushes returns pushes that hold nothing yet.
func NewReceiptPushes(o ReceiptPushesOptions) *ReceiptPushes {
	r := &ReceiptPushes{seed: maphash.MakeSeed(), onHold: o.OnHold, counter: o.Counter, hub: o.Hub, cluster: o.Cluster,
		tasks: o.Tasks, now: o.Now, afterFunc: o.AfterFunc, log: o.Logger}
	if r.now == nil {
		r.now = time.Now
	}
	if r.afterFunc == nil {
		r.afterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	for i := range r.shards {
		r.shards[i].convs = make(map[string]*convPushes)
	}
	return r
}

func (r *ReceiptPushes) shard(convID string) *pushShard {
	return &r.shards[maphash.String(r.seed, convID)%countShards]
}

// Sent records, after its commit, that m's sender sent it, and schedules a push of its
// conversation's counts. Only groups get count pushes.
func (rp *ReceiptPushes) Sent(m store.Message) {
	if !IsGroupID(m.ConvID) {
		return
	}
	r := rp.shard(m.ConvID)
	r.mu.Lock()
	c := r.convs[m.ConvID]
	if c == nil {
		if len(r.convs) >= maxPushedConvs {
			for id := range r.convs {
				r.forgetLocked(rp, id)
				break
			}
		}
		c = &convPushes{sent: make(map[string][]int64), pushed: make(map[int64]protocol.Receipts)}
		r.convs[m.ConvID] = c
		if rp.onHold != nil {
			rp.onHold(m.ConvID, true)
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
	rp.Changed(m.ConvID)
}

// Changed schedules a push of convID's counts, if its senders are known: positions moved,
// or members changed.
func (rp *ReceiptPushes) Changed(convID string) {
	r := rp.shard(convID)
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
	wait := c.last.Add(receiptsInterval).Sub(rp.now())
	r.mu.Unlock()
	if wait > 0 {
		rp.afterFunc(wait, func() { rp.tasks.Do(func(ctx context.Context) { rp.push(ctx, convID) }) })
		return
	}
	// Not on the caller's time: a send's ack, a batch of reads.
	rp.tasks.Go(func(ctx context.Context) { rp.push(ctx, convID) })
}

// push pushes to each sender of convID the counts of their messages that changed
// since the last push.
func (rp *ReceiptPushes) push(ctx context.Context, convID string) {
	r := rp.shard(convID)
	r.mu.Lock()
	c := r.convs[convID]
	if c == nil || c.inFlight {
		r.mu.Unlock()
		return
	}
	c.pending, c.changed, c.inFlight, c.last = false, false, true, rp.now()
	sent := make(map[string][]int64, len(c.sent))
	for u, seqs := range c.sent {
		// On one node a sender with no connection here has nobody to push to: its counts
		// are not worth building (a large group's first build reads every member). Its
		// next push, once connected, carries whatever changed since the last one. On
		// several nodes it may be connected elsewhere, so every sender counts.
		if rp.cluster == nil && !rp.hub.Online(u) {
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

	counts, err := rp.counter.ReceiptCounts(ctx, convID, sent)
	if err != nil && !errors.Is(err, ErrNoConversation) {
		rp.log.Warn("receipts push", "conv", convID, "err", err)
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
		if _, ok := counts[u]; (!ok && err == nil) || errors.Is(err, ErrNoConversation) {
			c.forgetSender(u) // no longer a member, or the group is gone
		}
	}
	again := c.changed
	if len(c.sent) == 0 && r.convs[convID] == c {
		r.forgetLocked(rp, convID) // nobody left to push to
		again = false
	}
	r.mu.Unlock()

	for _, f := range frames {
		rp.pushTo(f.sender, convID, f.receipts)
	}
	if again {
		rp.Changed(convID) // changes that came while this push was computed
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
func (r *pushShard) forgetLocked(rp *ReceiptPushes, convID string) {
	delete(r.convs, convID)
	if rp.onHold != nil {
		rp.onHold(convID, false)
	}
}

// MembersLeft drops the senders in left from convID's receipts pushes: they left the
// group, and are pushed nothing more of it.
func (rp *ReceiptPushes) MembersLeft(convID string, left []string) {
	if len(left) == 0 {
		return
	}
	r := rp.shard(convID)
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
		r.forgetLocked(rp, convID)
	}
}

type receiptFrame struct {
	sender   string
	receipts []protocol.Receipts
}

// pushTo hands userID's connections, on every node, a receipts push of convID with rs: a
// frame that is in no log. The other nodes get the counts, and encode the frame
// themselves.
func (rp *ReceiptPushes) pushTo(userID, convID string, rs []protocol.Receipts) {
	b, ok := ReceiptsBody(convID, rs)
	if !ok {
		return
	}
	rp.hub.Publish(userID, []hub.Event{{Body: b}})
	if rp.cluster != nil {
		rp.cluster.Ephemeral(userID, convID, rs)
	}
}
