package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// This file is chat's side of the receipts pushes (live.ReceiptPushes): when they are
// told of sends, position changes and members who left, and which counts a sender may see
// (receiptCounts, the live.ReceiptCounter).

// messageSent records, after its commit, that sender sent seq in convID, and that the
// sender's positions moved to it.
func (s *Service) messageSent(m store.Message) {
	s.positionsMoved(m.ConvID, m.SenderID, m.Seq, m.Seq)
	s.receipts.Sent(m)
}

// countsChanged schedules a push of convID's counts, if its senders are known.
func (s *Service) countsChanged(convID string) { s.receipts.Changed(convID) }

// membersLeft drops the senders in left from convID's receipts pushes: they left the
// group, and are pushed nothing more of it.
func (s *Service) membersLeft(convID string, left []string) { s.receipts.MembersLeft(convID, left) }

// receiptCounter is the Service as the receipts pushes' live.ReceiptCounter.
type receiptCounter struct{ s *Service }

var _ live.ReceiptCounter = receiptCounter{}

// ReceiptCounts implements live.ReceiptCounter with receiptCounts; ErrNotFound (the group
// is gone) wraps live.ErrNoConversation too.
func (r receiptCounter) ReceiptCounts(ctx context.Context, convID string, sent map[string][]int64) (map[string][]protocol.Receipts, error) {
	counts, err := r.s.receiptCounts(ctx, convID, sent)
	if errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("%w: %w", live.ErrNoConversation, err)
	}
	return counts, err
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
