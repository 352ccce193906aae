package bench

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/parleychat/parley/client"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes.
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

func newHist(digits int) *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, digits) }

func micros(d time.Duration) int64 { return min(max(int64(d/time.Microsecond), histMin), histMax) }

// encodeHist serialises h for the trip from a worker process (compressed HDR V2 format).
func encodeHist(h *hdrhistogram.Histogram) []byte {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil
	}
	return b
}

func decodeHist(b []byte) *hdrhistogram.Histogram {
	if len(b) == 0 {
		return nil
	}
	h, err := hdrhistogram.Decode(b)
	if err != nil {
		return nil
	}
	return h
}

// recorder gathers the measurements of one process: the latency of the scenario's main
// operation (a send's ack, a read, a connection handshake), the send-to-receive latency of
// deliveries, counts, errors by code, and all of it again per time slot for the charts.
// Safe for concurrent use.
type recorder struct {
	start    atomic.Int64 // unix nanos of the run's start (0 until started)
	interval time.Duration

	ops, acked, delivered, echoes atomic.Int64
	errCount                      atomic.Int64
	retries, retried429           atomic.Int64

	mu     sync.Mutex // guards the fields below
	lat    *hdrhistogram.Histogram
	dlat   *hdrhistogram.Histogram
	errors map[string]int64
	counts map[string]int64 // scenario-specific counters
	named  map[string]*hdrhistogram.Histogram
	maxes  map[string]int64
	slots  []*slot
}

type slot struct {
	ops, acked, delivered int64
	lat, dlat             *hdrhistogram.Histogram
}

func newRecorder(interval time.Duration) *recorder {
	return &recorder{
		interval: max(interval, time.Second),
		lat:      newHist(3), dlat: newHist(3),
		errors: map[string]int64{}, counts: map[string]int64{},
		named: map[string]*hdrhistogram.Histogram{}, maxes: map[string]int64{},
	}
}

// begin sets the time slots start from.
func (r *recorder) begin(at time.Time) { r.start.Store(at.UnixNano()) }

// slotLocked returns the slot of time at, or nil before the start. Lock mu must be held.
func (r *recorder) slotLocked(at time.Time) *slot {
	st := r.start.Load()
	if st == 0 || at.UnixNano() < st {
		return nil
	}
	i := int((at.UnixNano() - st) / int64(r.interval))
	if i > 100000 {
		return nil
	}
	for len(r.slots) <= i {
		r.slots = append(r.slots, &slot{})
	}
	return r.slots[i]
}

// op records one completed main operation that took d, finished at `at`.
func (r *recorder) op(at time.Time, d time.Duration) {
	r.ops.Add(1)
	us := micros(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.lat.RecordValue(us)
	if s := r.slotLocked(at); s != nil {
		s.ops++
		if s.lat == nil {
			s.lat = newHist(2)
		}
		_ = s.lat.RecordValue(us)
	}
}

// ack records one acknowledged message (its latency goes through op when sends are the main
// operation).
func (r *recorder) ack(at time.Time) {
	r.acked.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.slotLocked(at); s != nil {
		s.acked++
	}
}

// deliver records a message received by a device not of its sender, d after it was sent
// (d < 0: the send time is unknown).
func (r *recorder) deliver(at time.Time, d time.Duration) {
	r.delivered.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if d >= 0 {
		_ = r.dlat.RecordValue(micros(d))
	}
	if s := r.slotLocked(at); s != nil {
		s.delivered++
		if d >= 0 {
			if s.dlat == nil {
				s.dlat = newHist(2)
			}
			_ = s.dlat.RecordValue(micros(d))
		}
	}
}

// echo records a message received by a device of its own sender.
func (r *recorder) echo() { r.echoes.Add(1) }

// count adds n to a scenario-specific counter.
func (r *recorder) count(name string, n int64) {
	r.mu.Lock()
	r.counts[name] += n
	r.mu.Unlock()
}

// latency records d in the scenario-specific latency distribution name (in µs, as op's).
func (r *recorder) latency(name string, d time.Duration) { r.value(name, micros(d)) }

// value records v (at least 1, at most histMax) in the scenario-specific distribution name.
func (r *recorder) value(name string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.named[name]
	if h == nil {
		h = newHist(3)
		r.named[name] = h
	}
	_ = h.RecordValue(min(max(v, histMin), histMax))
}

// raise raises the scenario-specific figure name to v; workers' figures merge by their maximum
// (the last read's time, the busiest connection's rate).
func (r *recorder) raise(name string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.maxes[name]; !ok || v > old {
		r.maxes[name] = v
	}
}

// retry records a send the SDK is repeating (client.Options.OnRetry).
func (r *recorder) retry(err error, _ time.Duration) {
	r.retries.Add(1)
	if client.ErrorCode(err) == http.StatusTooManyRequests {
		r.retried429.Add(1)
	}
}

// fail records a failed operation under its error code.
func (r *recorder) fail(err error) {
	if err == nil {
		return
	}
	r.errCount.Add(1)
	code := errorCode(err)
	r.mu.Lock()
	r.errors[code]++
	r.mu.Unlock()
}

// errorCode names an error for the "errors by code" table: the wire code for server
// answers, otherwise a short class.
func errorCode(err error) string {
	if c := client.ErrorCode(err); c != 0 {
		return strconv.Itoa(c)
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, client.ErrReplaced):
		return "replaced"
	case errors.As(err, &ne):
		return "network"
	}
	return "other"
}

// errorStatus is errorCode's counterpart for a bare HTTP status.
func errorStatus(status int) string {
	if status == 0 {
		return "network"
	}
	return strconv.Itoa(status)
}

// slotOut is one time slot as a worker reports it.
type slotOut struct {
	Index     int    `json:"i"`
	Ops       int64  `json:"ops"`
	Acked     int64  `json:"acked"`
	Delivered int64  `json:"delivered"`
	Lat       []byte `json:"lat,omitempty"`
	DLat      []byte `json:"dlat,omitempty"`
}

// measures is the part of a worker's result the recorder fills.
type measures struct {
	Ops        int64            `json:"ops"`
	Acked      int64            `json:"acked"`
	Delivered  int64            `json:"delivered"`
	Echoes     int64            `json:"echoes"`
	Retries    int64            `json:"retries"`
	Retried429 int64            `json:"retried_429"`
	Errors     map[string]int64 `json:"errors"`
	Counts     map[string]int64 `json:"counts"`
	Latency    []byte           `json:"latency,omitempty"`
	DLatency   []byte           `json:"delivery_latency,omitempty"`
	Slots      []slotOut        `json:"slots,omitempty"`
	// Named are scenario-specific distributions (encoded like Latency); Maxes
	// scenario-specific figures that merge by their maximum.
	Named map[string][]byte `json:"named,omitempty"`
	Maxes map[string]int64  `json:"maxes,omitempty"`
}

func (r *recorder) export() measures {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := measures{
		Ops: r.ops.Load(), Acked: r.acked.Load(), Delivered: r.delivered.Load(), Echoes: r.echoes.Load(),
		Retries: r.retries.Load(), Retried429: r.retried429.Load(),
		Errors: maps.Clone(r.errors), Counts: maps.Clone(r.counts),
		Latency: encodeHist(r.lat), DLatency: encodeHist(r.dlat),
		Maxes: maps.Clone(r.maxes),
	}
	if len(r.named) > 0 {
		m.Named = make(map[string][]byte, len(r.named))
		for k, h := range r.named {
			m.Named[k] = encodeHist(h)
		}
	}
	for i, s := range r.slots {
		m.Slots = append(m.Slots, slotOut{Index: i, Ops: s.ops, Acked: s.acked, Delivered: s.delivered, Lat: encodeHist(s.lat), DLat: encodeHist(s.dlat)})
	}
	return m
}

// countingConn counts the bytes a connection carries.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// newHTTPClient returns an HTTP client for many devices talking to one server: a pool wide
// enough that devices never wait for a connection or churn through ports. counter, if not
// nil, counts every byte read and written on its connections (the SDK's WebSocket dialer
// borrows the same DialContext).
func newHTTPClient(maxConns int, counter *atomic.Int64) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := d.DialContext
	if counter != nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: counter}, nil
		}
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}}
}
