package attach

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
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
			if err == nil {
				err = s.sweepUploads(ctx)
			}
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
			return n, s.sweepUploads(ctx)
		}
	}
}

// sweepUploads removes the files of uploads that are no longer in progress: a crash
// between an upload's completion and the removal of its files, or between the collector's
// steps, leaves them behind, and nothing else would. An upload's row is created before its
// files, so files without a row (or with a row being deleted) are leftovers too.
func (s *Service) sweepUploads(ctx context.Context) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".info")
		if !ok || !protocol.ValidAttachmentID(id) {
			continue
		}
		a, err := s.chat.AttachmentRow(ctx, id)
		switch {
		case errors.Is(err, chat.ErrNotFound):
		case err != nil:
			return err
		case a.State == store.AttachmentUploading:
			continue
		}
		s.removeUpload(id)
	}
	return nil
}
