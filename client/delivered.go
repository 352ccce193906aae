package client

import (
	"context"
	"sync"

	"github.com/parleychat/parley/protocol"
)

// deliveredQueue coalesces AutoDelivered reports: delivered is a position, not a per-message
// flag, so one report per conversation carrying the highest seq says as much as one per
// message, at a fraction of the traffic. Reports are best effort: the cursor, not this,
// makes delivery reliable; they only feed receipts.
type deliveredQueue struct {
	mu      sync.Mutex       // guards pending and sent
	pending map[string]int64 // conv_id -> highest seq not yet reported
	sent    map[string]int64 // conv_id -> highest seq reported
	wake    chan struct{}    // capacity 1: "pending is not empty"
}

func (q *deliveredQueue) init() {
	q.pending = make(map[string]int64)
	q.sent = make(map[string]int64)
	q.wake = make(chan struct{}, 1)
}

// note records that seq arrived in convID. It never blocks: it runs inside event delivery.
func (q *deliveredQueue) note(convID string, seq int64) {
	q.mu.Lock()
	if seq > q.pending[convID] && seq > q.sent[convID] {
		q.pending[convID] = seq
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run reports pending positions until ctx ends, over the WebSocket when one is open (no new
// HTTP request per report) and over HTTP otherwise.
func (q *deliveredQueue) run(ctx context.Context, c *Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := q.pending
		q.pending = make(map[string]int64, len(batch))
		q.mu.Unlock()
		for convID, seq := range batch {
			if err := c.reportDelivered(ctx, convID, seq); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.log.Debug("parley: delivered report dropped", "conv_id", convID, "seq", seq, "err", err)
				continue
			}
			q.mu.Lock()
			q.sent[convID] = max(q.sent[convID], seq)
			q.mu.Unlock()
		}
	}
}

func (c *Client) reportDelivered(ctx context.Context, convID string, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if cn := c.conn.Load(); cn != nil {
		var out protocol.DeliveredPosition
		return cn.request(ctx, protocol.OpDelivered, protocol.PositionRequest{ConvID: convID, Seq: &seq}, &out)
	}
	_, err := c.MarkDelivered(ctx, convID, seq)
	return err
}
