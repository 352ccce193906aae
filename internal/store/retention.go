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
