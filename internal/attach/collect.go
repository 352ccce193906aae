package attach

import (
	"context"
	"time"
)

// collectBatch is how many idle attachments one pass of the collector takes at a time.
const collectBatch = 100

// Run collects idle attachments every Config.CollectEvery until ctx ends.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.CollectEvery)
	defer t.Stop()
	for {
		if _, err := s.Collect(ctx, s.chat.Now()); err != nil && ctx.Err() == nil {
			s.log.Warn("attach: collect", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Collect deletes every attachment that no message has carried for Config.IdleAfter before
// now (never sent, or every message that carried it recalled), and returns how many. Each
// goes in three steps, so that a crash at any point leaves one that the next pass finishes:
// the row is marked deleting (from then on nobody can send or download it), the blobs and
// upload files are removed, the row is removed.
func (s *Service) Collect(ctx context.Context, now time.Time) (int, error) {
	before := now.Add(-s.cfg.IdleAfter)
	n := 0
	for {
		idle, err := s.chat.IdleAttachments(ctx, before, collectBatch)
		if err != nil || len(idle) == 0 {
			return n, err
		}
		for _, a := range idle {
			ok, err := s.chat.StartDeletingAttachment(ctx, a.ID, before)
			if err != nil {
				return n, err
			}
			if !ok {
				continue // sent meanwhile
			}
			if err := s.blobs.Delete(ctx, contentKey(a.ID)); err != nil {
				return n, err
			}
			if err := s.blobs.Delete(ctx, thumbKey(a.ID)); err != nil {
				return n, err
			}
			s.removeUpload(a.ID)
			if err := s.chat.FinishDeletingAttachment(ctx, a.ID); err != nil {
				return n, err
			}
			n++
		}
		if len(idle) < collectBatch {
			return n, nil
		}
	}
}
