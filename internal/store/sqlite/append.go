package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleychat/parley/internal/store"
)

// appendMessage is AppendMessage inside an Update: it loads the rows store.DecideAppend
// reads, in the order it reads them, and writes the plan. The single writer makes the
// load and the writes one atomic step.
func (t writeTx) appendMessage(ctx context.Context, m store.Message) (store.Appended, error) {
	v, err := t.loadAppend(ctx, m)
	if err != nil {
		return store.Appended{}, err
	}
	var p store.AppendPlan
	if err := store.DecideAppend(m, &v, &p); err != nil || p.Duplicate {
		return p.Appended, err
	}
	if err := t.InsertMessage(ctx, p.Message); err != nil {
		return store.Appended{}, err
	}
	if p.Attachment != nil {
		if err := t.countAttachment(ctx, p.Attachment); err != nil {
			return store.Appended{}, err
		}
	}
	if err := t.UpdateConversation(ctx, p.Conv); err != nil {
		return store.Appended{}, err
	}
	for _, d := range p.Events {
		if err := t.putEvent(ctx, p.Event(d)); err != nil {
			return store.Appended{}, err
		}
	}
	for i, after := range p.After {
		if p.Changed[i] {
			if err := t.PutMember(ctx, after); err != nil {
				return store.Appended{}, err
			}
		}
	}
	return p.Appended, nil
}

// loadAppend reads what store.DecideAppend needs for m, stopping where the rule will.
// The sender's membership is read by one lookup before every member is: a non-member's
// refusal then costs the same in a large group as for a missing conversation.
func (t writeTx) loadAppend(ctx context.Context, m store.Message) (store.AppendView, error) {
	var v store.AppendView
	if orig, err := t.MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err == nil {
		v.Original = &orig
		return v, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return v, err
	}
	c, err := t.Conversation(ctx, m.ConvID)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil
	} else if err != nil {
		return v, err
	}
	v.Conv = &c
	sender, err := t.Member(ctx, m.ConvID, m.SenderID)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil
	} else if err != nil {
		return v, err
	}
	v.Sender = &sender
	if m.AttachmentID != "" { // read only then: a plain send costs no extra statement
		if v.Attachment, err = t.loadAttachment(ctx, m.AttachmentID); err != nil {
			return v, err
		}
		if a := v.Attachment; a == nil || a.OwnerID != m.SenderID || a.State != store.AttachmentComplete {
			return v, nil // the rule refuses it (ErrBadAttachment) before reading more
		}
	}
	var logs []string // the users whose logs get the event
	if c.ReadFanout() {
		for _, u := range store.MentionedUsers(m) {
			if _, err := t.Member(ctx, m.ConvID, u); errors.Is(err, store.ErrNotFound) {
				continue // not a member: the mention is only stored
			} else if err != nil {
				return v, err
			}
			v.Mentioned = append(v.Mentioned, u)
		}
		logs = v.Mentioned
		if v.LastMark, err = t.lastMark(ctx, 0); err != nil {
			return v, err
		}
	} else {
		if v.Members, err = t.Members(ctx, c.ID); err != nil {
			return v, err
		}
		logs = make([]string, len(v.Members))
		for i, mem := range v.Members {
			logs[i] = mem.UserID
		}
	}
	v.Logs = make([]int64, len(logs))
	for i, u := range logs {
		b, err := t.Cursors(ctx, u)
		if err != nil {
			return v, fmt.Errorf("append message event for %s: %w", u, err)
		}
		v.Logs[i] = b.Last
	}
	return v, nil
}

// putEvent stores e under the cursor it carries, which the append rule gave it: the last
// cursor of the user's log, read in the same Update, plus one.
func (t writeTx) putEvent(ctx context.Context, e store.Event) error {
	if _, err := t.q.exec(ctx, stPutEvent, e.UserID, e.Cursor, e.Type, e.ConvID, e.TS, e.Seq, blob(e.Data)); err != nil {
		return t.q.fail(err, "append event: user %q", e.UserID)
	}
	return nil
}
