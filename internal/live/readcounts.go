package live

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/rank"
	"github.com/parleychat/parley/internal/store"
)

// ReadCounts answers "read by N of M" for the groups that show counts only (no readers'
// names), without scanning their members: for each conversation whose receipts were asked
// for, every member's read and delivered positions, and the two multisets of them
// (rank.Multiset), so that a count is O(log M). It holds committed positions only: it is
// built from a read snapshot the first time a conversation is asked for, and then raised by
// every position change this process commits. Positions only move forward, so applying the
// larger of two values in any order gives the same state: position changes that overtake a
// build are applied to it once it is done, and a build that a member change overtook is
// thrown away rather than installed. Member changes add and remove
// members (ChangeMembers), so that a group with steady joins is not counted from all its
// members again and again. On several nodes the raises other nodes commit reach it
// through the bus, and their member changes drop the conversation (cluster.go).
//
// Every send and read goes through it, so it is split in shards by conversation, each with
// its own lock, like the hub: no lock is shared by the sends of all conversations.
type ReadCounts struct {
	seed   maphash.Seed
	shards [countShards]countShard
	// onHold, if set (on one of several nodes), is told whether a group is held or being
	// built, so that the node receives the raises other nodes commit for it (cluster.go).
	// It is called with the shard's lock held.
	onHold func(convID string, on bool)
	// ttl, if not zero (on one of several nodes), is how long a group's counts are used
	// after they were built: a raise another node committed whose bus message was lost
	// is then counted when they are built again. Zero keeps them until dropped.
	ttl time.Duration
}

const countShards = 64

type countShard struct {
	mu       sync.Mutex
	convs    map[string]*convCounts
	members  int                       // members held by all convs, for the bound
	building map[string]*buildInFlight // conversations being built, by the builds' count
}

// maxCountedMembers bounds what a shard holds (about 100 bytes a member): 64 Mi members in all.
const maxCountedMembers = 1 << 20

type convCounts struct {
	pos             map[string][2]int64 // user -> read, delivered
	read, delivered rank.Multiset
	built           time.Time // for ReadCounts.ttl
	// staleAt, if not zero, is when they are dropped, to be built again: another node
	// told of a change they may miss (ForgetSoon). Not before rebuildEvery after built.
	staleAt time.Time
}

// rebuildEvery is the least time between a conversation's build and the next one that
// the bus asks for (a member change on another node, a raise of a member not counted):
// building a group's counts reads all its members, and a message of the bus, which a
// node holding its key could send at will, must not make this node read 100,000 members
// each time. The counts may miss another node's member change for that long.
const rebuildEvery = 5 * time.Second

type buildInFlight struct {
	n      int  // builds under way
	stale  bool // a member change came meanwhile: their snapshots may miss it
	soon   bool // one on another node came meanwhile: installed, they go stale (ForgetSoon)
	raised []raise
}

// raise is a position change committed while a build was under way: its snapshot may or may
// not have it, and since positions only move forward, applying it to the build once done
// is right either way. (Throwing such builds away, as member changes do, would never let a
// large group be counted while its members read and send: a build of 100,000 members takes
// longer than the gap between two of them.)
type raise struct {
	user            string
	read, delivered int64
	remote          bool // told by another node (AdvanceElsewhere)
}

// NewReadCounts returns counts that hold nothing yet. onHold, if not nil (on one of several
// nodes), is told whether a group is held or being built; ttl, if not zero, is how long
// counts are used after they were built (the fields of the same names).
func NewReadCounts(onHold func(convID string, on bool), ttl time.Duration) *ReadCounts {
	r := &ReadCounts{seed: maphash.MakeSeed(), onHold: onHold, ttl: ttl}
	for i := range r.shards {
		r.shards[i] = countShard{convs: make(map[string]*convCounts), building: make(map[string]*buildInFlight)}
	}
	return r
}

func (rc *ReadCounts) shard(convID string) *countShard {
	return &rc.shards[maphash.String(rc.seed, convID)%countShards]
}

// Count returns, for conversation convID, how many members other than sender there are,
// and how many of them have read and received seq; ok is false if it is not held.
func (rc *ReadCounts) Count(convID, sender string, seq int64) (members, read, delivered int, ok bool) {
	r := rc.shard(convID)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.convs[convID]
	if c != nil && (rc.ttl > 0 && time.Since(c.built) > rc.ttl || !c.staleAt.IsZero() && !time.Now().Before(c.staleAt)) {
		r.dropLocked(convID)
		rc.held(r, convID)
		c = nil
	}
	if c == nil {
		return 0, 0, 0, false
	}
	members, read, delivered = len(c.pos), c.read.AtLeast(seq), c.delivered.AtLeast(seq)
	if p, in := c.pos[sender]; in {
		members--
		if p[0] >= seq {
			read--
		}
		if p[1] >= seq {
			delivered--
		}
	}
	return members, read, delivered, true
}

// StartBuild registers a build of convID about to read its members; the returned function
// installs what was read, unless a change overtook it.
func (rc *ReadCounts) StartBuild(convID string) (install func([]store.Member)) {
	r := rc.shard(convID)
	r.mu.Lock()
	b := r.building[convID]
	if b == nil {
		b = &buildInFlight{}
		r.building[convID] = b
		rc.held(r, convID) // before the snapshot, so that no raise after it is missed
	}
	b.n++
	r.mu.Unlock()
	return func(ms []store.Member) {
		r.mu.Lock()
		defer r.mu.Unlock()
		defer rc.held(r, convID)
		if b.n--; b.n == 0 {
			delete(r.building, convID)
		}
		if ms == nil || b.stale || r.convs[convID] != nil {
			return
		}
		raised := b.raised
		if r.members+len(ms) > maxCountedMembers {
			for id, c := range r.convs { // arbitrary ones go; they are built again when asked
				r.members -= len(c.pos)
				delete(r.convs, id)
				rc.held(r, id)
				if r.members+len(ms) <= maxCountedMembers {
					break
				}
			}
		}
		c := &convCounts{pos: make(map[string][2]int64, len(ms)), built: time.Now()}
		if b.soon {
			c.staleAt = c.built.Add(rebuildEvery)
		}
		for _, m := range ms {
			c.pos[m.UserID] = [2]int64{m.ReadSeq, m.DeliveredSeq}
			c.read.Add(m.ReadSeq)
			c.delivered.Add(m.DeliveredSeq)
		}
		r.convs[convID] = c
		r.members += len(ms)
		for _, x := range raised {
			if r.convs[convID] != c {
				break // dropped by a raise of a user it does not count
			}
			r.raiseLocked(convID, c, x)
		}
	}
}

// Advance raises user's positions in convID to at least read and delivered, after a commit.
func (rc *ReadCounts) Advance(convID, user string, read, delivered int64) {
	rc.raise(convID, raise{user: user, read: read, delivered: delivered})
}

// AdvanceElsewhere is Advance for a commit another node told of: a raise of a user the
// counts do not hold makes them stale (ForgetSoon) rather than dropped at once.
func (rc *ReadCounts) AdvanceElsewhere(convID, user string, read, delivered int64) {
	rc.raise(convID, raise{user: user, read: read, delivered: delivered, remote: true})
}

func (rc *ReadCounts) raise(convID string, x raise) {
	r := rc.shard(convID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.building[convID]; b != nil {
		b.raised = append(b.raised, x)
	}
	if c := r.convs[convID]; c != nil {
		if r.raiseLocked(convID, c, x); r.convs[convID] == nil {
			rc.held(r, convID) // dropped
		}
	}
}

// raiseLocked raises x.user's positions in c, convID's counts. r.mu must be held.
func (r *countShard) raiseLocked(convID string, c *convCounts, x raise) {
	user, read, delivered := x.user, x.read, x.delivered
	p, in := c.pos[user]
	if !in && x.remote {
		c.staleSoon() // a join another node made, whose news may be on its way or lost
		return
	}
	if !in {
		r.dropLocked(convID) // a join not applied yet: see ChangeMembers
		return
	}
	if read > p[0] {
		c.read.Remove(p[0])
		c.read.Add(read)
		p[0] = read
	}
	if delivered > p[1] {
		c.delivered.Remove(p[1])
		c.delivered.Add(delivered)
		p[1] = delivered
	}
	c.pos[user] = p
}

// ChangeMembers applies a committed member change to convID: the members joined, with
// their positions as the change wrote them, are counted and the users in left are not, so
// that a group with steady joins is not counted again from all its members each time.
//
// Changes are applied after their commits, in whatever order the callers get here, so
// what it finds tells whether that order was the commits': a joiner already held, a leaver
// not held, or (in Advance) a position of a member not held means a change and a position
// update crossed (a leave and a join again of one user, a read by a joiner before the
// join is applied). It then drops the conversation, to be counted again from a snapshot
// when next asked; that is rare, and the counts are never wrong.
func (rc *ReadCounts) ChangeMembers(convID string, joined []store.Member, left []string) {
	r := rc.shard(convID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.building[convID]; b != nil {
		b.stale = true
	}
	c := r.convs[convID]
	if c == nil {
		return
	}
	for _, m := range joined {
		if _, in := c.pos[m.UserID]; in {
			r.dropLocked(convID)
			rc.held(r, convID)
			return
		}
		c.pos[m.UserID] = [2]int64{m.ReadSeq, m.DeliveredSeq}
		c.read.Add(m.ReadSeq)
		c.delivered.Add(m.DeliveredSeq)
		r.members++
	}
	for _, u := range left {
		p, in := c.pos[u]
		if !in {
			r.dropLocked(convID)
			rc.held(r, convID)
			return
		}
		delete(c.pos, u)
		c.read.Remove(p[0])
		c.delivered.Remove(p[1])
		r.members--
	}
}

// dropLocked forgets convID. r.mu must be held. It does not tell onHold: its callers hold
// convID still (a build), or are about to tell it.
func (r *countShard) dropLocked(convID string) {
	if c := r.convs[convID]; c != nil {
		r.members -= len(c.pos)
		delete(r.convs, convID)
	}
}

// ForgetSoon is for a member change another node told of, which sends the change, not the
// members: the counts held are dropped, and the builds under way installed but dropped, once rebuildEvery has passed
// since they were built, so that the bus never makes this node rebuild a conversation's
// counts more often than that.
func (rc *ReadCounts) ForgetSoon(convID string) {
	r := rc.shard(convID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.building[convID]; b != nil {
		b.soon = true
	}
	if c := r.convs[convID]; c != nil {
		c.staleSoon()
	}
}

// staleSoon marks c to be dropped once rebuildEvery has passed since it was built, or at
// once if it has.
func (c *convCounts) staleSoon() {
	at := c.built.Add(rebuildEvery)
	if now := time.Now(); now.After(at) {
		at = now
	}
	if c.staleAt.IsZero() || at.Before(c.staleAt) {
		c.staleAt = at
	}
}

// held tells onHold whether convID is held or being built in r, its shard. r.mu must be
// held.
func (rc *ReadCounts) held(r *countShard, convID string) {
	if rc.onHold != nil && IsGroupID(convID) {
		rc.onHold(convID, r.convs[convID] != nil || r.building[convID] != nil)
	}
}
