package store

import "time"

// RetentionCutoff returns the Unix ms before which messages have expired under a
// retention of d at now, or 0 when d is 0 (messages are kept for ever). An expired message
// is gone for every read at once; the retention pass deletes it later (docs/design.md,
// "Retention"). Messages are never older than the one before them (DecideAppend), so what
// has expired of a conversation is always a prefix of its seqs.
func RetentionCutoff(d time.Duration, now time.Time) int64 {
	if d <= 0 {
		return 0
	}
	return now.Add(-d).UnixMilli()
}

// RetentionPolicy is the operator's retention: Default for every conversation, and the
// bounds of the retention a group's owner may give the group instead.
type RetentionPolicy struct {
	Default  time.Duration // 0: messages are kept for ever
	GroupMin time.Duration // the shortest a group's own may be
	GroupMax time.Duration // the longest; 0: no bound
}

// Allows reports whether d, a group's own retention asked for (positive), is within p's
// bounds.
func (p RetentionPolicy) Allows(d time.Duration) bool {
	return d >= p.GroupMin && (p.GroupMax <= 0 || d <= p.GroupMax)
}

// ConversationRetention returns how long c's messages are kept under p (0: for ever):
// the group's own retention when it has one, held within p's bounds (an operator who
// narrows them narrows the groups that chose beyond them), else p.Default. It is the one
// rule every expiry follows: the pass's deletions, the reads' filtering, history's
// expired_before_seq and the retention_seconds of a conversation's brief.
func ConversationRetention(c Conversation, p RetentionPolicy) time.Duration {
	if c.RetentionMS <= 0 {
		return p.Default
	}
	d := max(time.Duration(c.RetentionMS)*time.Millisecond, p.GroupMin)
	if p.GroupMax > 0 {
		d = min(d, p.GroupMax)
	}
	return d
}

// ConversationCutoff is RetentionCutoff of c's retention under p.
func ConversationCutoff(c Conversation, p RetentionPolicy, now time.Time) int64 {
	return RetentionCutoff(ConversationRetention(c, p), now)
}

// KeptAfter returns the Unix ms from which no message has expired in any conversation
// under p at now: a read of messages created at or after it need not read their
// conversation to know they are kept. It is the cutoff of the shortest retention any
// conversation can have (a group's own is at least p.GroupMin and a millisecond).
func (p RetentionPolicy) KeptAfter(now time.Time) int64 {
	shortest := max(p.GroupMin, time.Millisecond)
	if p.Default > 0 {
		shortest = min(shortest, p.Default)
	}
	return RetentionCutoff(shortest, now)
}
