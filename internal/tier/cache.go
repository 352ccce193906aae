package tier

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/store"
)

// DefaultCacheBytes is the default bound of the segment cache.
const DefaultCacheBytes = 64 << 20

// cache holds decoded segments, the least recently used dropped first once their size
// passes max. A history page from a cold segment costs one blob read and one decode the
// first time and a map lookup after; concurrent readers of one segment share its load.
type cache struct {
	blobs blob.Store
	max   int64
	obs   Observer
	load  singleflight.Group
	// policy and now are the retention's: reads leave out the messages created before
	// their conversation's cutoff (store.ConversationCutoff).
	policy store.RetentionPolicy
	now    func() time.Time

	mu    sync.Mutex
	size  int64
	order *list.List               // of *entry, most recent first
	items map[string]*list.Element // by key
}

type entry struct {
	key  string
	ms   []store.Message
	size int64
}

func newCache(blobs blob.Store, max int64, obs Observer) *cache {
	if max <= 0 {
		max = DefaultCacheBytes
	}
	return &cache{blobs: blobs, max: max, obs: obs, now: time.Now, order: list.New(), items: make(map[string]*list.Element)}
}

// messages returns the decoded messages of seg, from the cache or the blob store. The
// slice is shared: callers copy what they change.
func (c *cache) messages(ctx context.Context, seg store.Segment) ([]store.Message, error) {
	c.mu.Lock()
	if e, ok := c.items[seg.Key]; ok {
		c.order.MoveToFront(e)
		ms := e.Value.(*entry).ms
		c.mu.Unlock()
		c.obs.SegmentRead(true)
		return ms, nil
	}
	c.mu.Unlock()
	v, err, _ := c.load.Do(seg.Key, func() (any, error) {
		ms, err := c.fetch(ctx, seg)
		if err != nil {
			return nil, err
		}
		c.put(seg.Key, ms)
		return ms, nil
	})
	if err != nil {
		return nil, err
	}
	c.obs.SegmentRead(false)
	return v.([]store.Message), nil
}

func (c *cache) fetch(ctx context.Context, seg store.Segment) ([]store.Message, error) {
	return fetch(ctx, c.blobs, seg)
}

// fetch reads and decodes seg's blob from blobs.
func fetch(ctx context.Context, blobs blob.Store, seg store.Segment) ([]store.Message, error) {
	o, err := blobs.Open(ctx, seg.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: tier: open segment %s: %w", store.ErrUnavailable, seg.Key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(io.LimitReader(o, seg.Bytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: tier: read segment %s: %w", store.ErrUnavailable, seg.Key, err)
	}
	if int64(len(b)) != seg.Bytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the index says %d", errCorrupt, seg.Key, len(b), seg.Bytes)
	}
	return decode(b, seg)
}

func (c *cache) put(key string, ms []store.Message) {
	size := int64(0)
	for i := range ms {
		size += messageSize(&ms[i])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; ok {
		return
	}
	c.items[key] = c.order.PushFront(&entry{key: key, ms: ms, size: size})
	c.size += size
	for c.size > c.max && c.order.Len() > 1 {
		e := c.order.Remove(c.order.Back()).(*entry)
		delete(c.items, e.key)
		c.size -= e.size
	}
}

// messageSize is about what a decoded message holds in memory.
func messageSize(m *store.Message) int64 {
	n := 160 + len(m.MsgID) + len(m.ClientMsgID) + len(m.SenderID) + len(m.Content) + len(m.Extra) + len(m.AttachmentID)
	for _, u := range m.Mentions {
		n += 16 + len(u)
	}
	return int64(n)
}
