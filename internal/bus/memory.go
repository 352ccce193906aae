package bus

import (
	"context"
	"sync"
	"sync/atomic"
)

// DefaultQueueLen is the per-subscription queue length used when an option leaves it zero.
const DefaultQueueLen = 1024

// MemoryOptions configure a Memory bus. The zero value is ready to use.
type MemoryOptions struct {
	// QueueLen bounds each subscription's queue of undelivered messages (DefaultQueueLen if
	// zero). When a message arrives at a full queue, the oldest queued message is dropped and
	// counted in Dropped: the newest wake-up carries the newest cursor, so it is the one to
	// keep.
	QueueLen int
}

// Memory is the in-process Bus of a single node. Each subscription has a bounded queue and one
// goroutine that calls its handler, so Publish only copies data into the queues and never waits.
type Memory struct {
	queueLen int
	dropped  atomic.Int64

	mu     sync.RWMutex // guards subs and closed
	subs   map[string]map[*memorySub]struct{}
	closed bool
}

var _ Bus = (*Memory)(nil)

// NewMemory returns an empty in-process bus.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	return &Memory{queueLen: opts.QueueLen, subs: make(map[string]map[*memorySub]struct{})}
}

// Publish implements Bus. It copies data into the queue of every subscription of subject,
// dropping the oldest queued message of any queue that is full.
func (m *Memory) Publish(ctx context.Context, subject string, data []byte) error {
	if err := checkPublish(ctx, subject); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	for s := range m.subs[subject] {
		m.dropped.Add(s.push(append([]byte(nil), data...)))
	}
	return nil
}

// Subscribe implements Bus.
func (m *Memory) Subscribe(subject string, handler func(data []byte)) (Subscription, error) {
	if err := checkSubscribe(subject, handler); err != nil {
		return nil, err
	}
	s := &memorySub{bus: m, subject: subject, queue: make(chan []byte, m.queueLen), done: make(chan struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.subs[subject] == nil {
		m.subs[subject] = make(map[*memorySub]struct{})
	}
	m.subs[subject][s] = struct{}{}
	go s.run(handler)
	return s, nil
}

// Close implements Bus.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	for _, set := range m.subs {
		for s := range set {
			s.stop()
		}
	}
	m.subs = nil
	return nil
}

// Dropped returns how many messages were dropped from full subscription queues so far.
func (m *Memory) Dropped() int64 { return m.dropped.Load() }

// Healthy always returns nil: an in-process bus cannot lose its transport.
func (m *Memory) Healthy() error { return nil }

type memorySub struct {
	bus      *Memory
	subject  string
	queue    chan []byte
	done     chan struct{}
	stopOnce sync.Once
}

// push queues data without blocking and returns how many queued messages it dropped.
// Publishers hold bus.mu for reading, so several may push at once.
func (s *memorySub) push(data []byte) int64 {
	var dropped int64
	for {
		select {
		case s.queue <- data:
			return dropped
		default:
		}
		select {
		case <-s.queue:
			dropped++
		default:
		}
	}
}

func (s *memorySub) run(handler func([]byte)) {
	for {
		select {
		case <-s.done:
			return
		case data := <-s.queue:
			select {
			case <-s.done:
				return
			default:
			}
			handler(data)
		}
	}
}

func (s *memorySub) stop() { s.stopOnce.Do(func() { close(s.done) }) }

// Unsubscribe implements Subscription.
func (s *memorySub) Unsubscribe() error {
	m := s.bus
	m.mu.Lock()
	if set := m.subs[s.subject]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(m.subs, s.subject)
		}
	}
	m.mu.Unlock()
	s.stop()
	return nil
}
