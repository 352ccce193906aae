package tier

// Observer receives the tier's measurements (metrics.Metrics implements it).
type Observer interface {
	// SegmentSealed: a pass sealed a segment of n messages, raw bytes before compression
	// and stored bytes after.
	SegmentSealed(n int, raw, stored int64)
	// MessagesExpired: a pass deleted n messages whose retention had passed, hot ones in
	// one commit or a whole sealed segment.
	MessagesExpired(n int)
	// SegmentRead: a read needed a cold segment, from the cache (hit) or the blob store.
	SegmentRead(hit bool)
	// TierPass: a pass ended, having sealed that many messages, failed or not.
	TierPass(sealed int, failed bool)
}

type nopObserver struct{}

func (nopObserver) SegmentSealed(int, int64, int64) {}
func (nopObserver) MessagesExpired(int)             {}
func (nopObserver) SegmentRead(bool)                {}
func (nopObserver) TierPass(int, bool)              {}
