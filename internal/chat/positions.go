package chat

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// position says which of a member's positions an update moves.
type position int

const (
	readPos position = iota
	deliveredPos
)

// MarkRead advances the caller's read position to max(old, min(seq, max_seq)) and returns
// the position after the call. Raising it raises the delivered position with it and emits a
// "read" event to the caller (and to the peer in a direct conversation); an update that does
// not advance it changes and emits nothing.
func (s *Service) MarkRead(ctx context.Context, me Identity, convID string, seq int64) (int64, error) {
	return s.advance(ctx, me, convID, seq, readPos)
}

// MarkDelivered advances the caller's delivered position like MarkRead; in a direct
// conversation an advance emits a "delivered" event to the peer.
func (s *Service) MarkDelivered(ctx context.Context, me Identity, convID string, seq int64) (int64, error) {
	return s.advance(ctx, me, convID, seq, deliveredPos)
}

// advance implements both position updates. The store enforces monotonicity
// (store.MemberWriter.AdvancePositions), so no interleaving of devices or stale requests can
// move a position backwards. A read snapshot
// first answers the updates that would change nothing (stale or repeated), which are most
// of a read storm, without taking the writer. In a read-fanout conversation the updates
// that move are batched (positionBatch): a large group's members read at once.
func (s *Service) advance(ctx context.Context, me Identity, convID string, seq int64, p position) (int64, error) {
	if seq < 0 {
		return 0, invalid("seq must not be negative")
	}
	var cur int64
	var moves, batched bool
	var after store.Member // the member as the update left it, if it moved
	err := s.view(ctx, "position", func(tx store.ReadTx) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		cur, moves = target(c, m, seq, p)
		batched = c.ReadFanout()
		return err
	})
	if err != nil || !moves {
		return cur, err
	}
	if batched {
		return s.advanceBatched(ctx, convID, me.UserID, seq, p)
	}
	err = s.update(ctx, "position", func(tx store.Tx, ob *outbox) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if cur, moves = target(c, m, seq, p); !moves {
			return nil
		}
		read := int64(0)
		if p == readPos {
			read = cur // reading raises delivered with it
		}
		if m, moves, err = tx.AdvancePositions(ctx, convID, me.UserID, read, cur); err != nil || !moves {
			return err
		}
		if cur = m.DeliveredSeq; p == readPos {
			cur = m.ReadSeq
		}
		after = m
		return s.emitPosition(ctx, tx, ob, c, me.UserID, cur, p)
	})
	if err == nil && after.UserID != "" {
		s.positionsMoved(convID, me.UserID, after.ReadSeq, after.DeliveredSeq)
	}
	return cur, err
}

// positionsMoved records a member's positions after a commit moved them: the read counts
// held in memory follow them, and the senders of the group's messages get them pushed, on
// this node and (through the bus) on the others.
func (s *Service) positionsMoved(convID, userID string, read, delivered int64) {
	s.raised(convID, userID, read, delivered)
	if s.cluster != nil && live.IsGroupID(convID) { // only groups are counted (showsReaders)
		s.cluster.Positions(convID, userID, read, delivered)
	}
}

// raised records a member's positions committed by this node.
func (s *Service) raised(convID, userID string, read, delivered int64) {
	s.counts.Advance(convID, userID, read, delivered)
	s.countsChanged(convID) // and their senders are told
}

// raisedElsewhere records a member's positions another node told of (live.ReadCounts'
// AdvanceElsewhere).
func (s *Service) raisedElsewhere(convID, userID string, read, delivered int64) {
	s.counts.AdvanceElsewhere(convID, userID, read, delivered)
	s.countsChanged(convID)
}

// target returns the position after an update to seq, and whether it moves.
func target(c store.Conversation, m store.Member, seq int64, p position) (int64, bool) {
	old := m.ReadSeq
	if p == deliveredPos {
		old = m.DeliveredSeq
	}
	next := max(old, min(seq, c.MaxSeq))
	return next, next > old
}

func (s *Service) emitPosition(ctx context.Context, tx store.Tx, ob *outbox, c store.Conversation, userID string, pos int64, p position) error {
	var to []string
	var typ string
	var data any
	if p == readPos {
		typ, data, to = protocol.EventRead, protocol.ReadData{UserID: userID, ReadSeq: pos}, []string{userID}
	} else {
		typ, data = protocol.EventDelivered, protocol.DeliveredData{UserID: userID, DeliveredSeq: pos}
	}
	if c.Type == protocol.TypeDirect {
		members, err := tx.Members(ctx, c.ID)
		if err != nil {
			return err
		}
		for _, m := range members {
			if m.UserID != userID {
				to = append(to, m.UserID)
			}
		}
	}
	return ob.appendDataTo(ctx, tx, to, typ, c.ID, s.nowMS(), data)
}

// Receipts counts, among the members other than the sender of message seq, those whose read
// and delivered positions reached seq. Readers are listed where showsReaders. A message the
// caller cannot see (seq <= their visible_from: sent before they joined, or cleared) is
// ErrNotFound, as a message that does not exist: a late joiner learns nothing of what was
// said before.
func (s *Service) Receipts(ctx context.Context, me Identity, convID string, seq int64) (protocol.Receipts, error) {
	var r protocol.Receipts
	var built []store.Member
	install := s.counts.StartBuild(convID) // before the snapshot: see live.ReadCounts
	defer func() { install(built) }()
	s.AwaitSubscriptions() // and other nodes' raises after the snapshot reach it
	err := s.view(ctx, "receipts", func(tx store.ReadTx) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if seq <= visibleFrom(m) || seq > c.MaxSeq {
			return errNoMessage
		}
		msg, err := tx.Message(ctx, convID, seq)
		if errors.Is(err, store.ErrNotFound) {
			return errNoMessage // expired (retention)
		}
		if err != nil {
			return err
		}
		if !showsReaders(c) {
			// Counts only: from the members' positions held in memory, in O(log M).
			if members, read, delivered, ok := s.counts.Count(convID, msg.SenderID, seq); ok {
				r = protocol.Receipts{Seq: seq, MemberCount: members, ReadCount: read, DeliveredCount: delivered}
				return nil
			}
		}
		members, err := tx.Members(ctx, convID)
		if err != nil {
			return err
		}
		if !showsReaders(c) {
			built = members
		}
		r = countReceipts(c, msg.SenderID, seq, members)
		return nil
	})
	return r, err
}

func countReceipts(c store.Conversation, sender string, seq int64, members []store.Member) protocol.Receipts {
	r := protocol.Receipts{Seq: seq}
	var readers []string
	for _, m := range members {
		if m.UserID == sender {
			continue
		}
		r.MemberCount++
		if m.ReadSeq >= seq {
			r.ReadCount++
			readers = append(readers, m.UserID)
		}
		if m.DeliveredSeq >= seq {
			r.DeliveredCount++
		}
	}
	if showsReaders(c) {
		if readers == nil {
			readers = []string{}
		}
		r.Readers = &readers
	}
	return r
}

// errNoMessage answers receipts of a message that does not exist and, alike, of one the
// caller cannot see; it echoes nothing, so the two answers are identical.
var errNoMessage = notFound("no message with this seq that you can see")

// showsReaders reports whether members see each other's read positions in c: in direct
// conversations and in groups created with read_detail. Other groups show only counts, so a
// member's reading stays private there (receipts, snapshots).
func showsReaders(c store.Conversation) bool {
	return c.Type == protocol.TypeDirect || c.ReadDetail
}
