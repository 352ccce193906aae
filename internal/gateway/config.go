package gateway

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the gateway's tunables. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// HeartbeatInterval is how often the server pings each WebSocket. Default 30 s.
	HeartbeatInterval time.Duration
	// IdleTimeout closes a WebSocket from which nothing (frame or pong) arrived for this
	// long. It must exceed HeartbeatInterval. Default 75 s.
	IdleTimeout time.Duration
	// SendQueue is the number of pushed events a WebSocket may have pending (the push queue
	// and the hub subscription each hold this many; replies have a queue of their own). A
	// client that lets them fill is disconnected. Default 256.
	SendQueue int
	// WriteTimeout bounds one WebSocket write, and each writeChunk (64 KiB) of an HTTP
	// response: a client that does not read for this long is disconnected, so that a
	// client that asks for large answers and never reads them cannot hold handlers, their
	// buffers and file descriptors. It bounds progress, not the whole response, so that a
	// slow but steady client still gets a large page (and is not cut, and retrying, for
	// ever). Not http.Server.WriteTimeout, which would also cut long-polls. Default 10 s.
	WriteTimeout time.Duration
	// MaxBodyBytes is the largest HTTP request body; larger ones get 413. Default 1 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the time a client may take to send a request body, from the end
	// of its headers: a body that trickles in slower is cut with 408 and the connection is
	// closed, so that slow senders cannot hold connections and file descriptors. It is a
	// per-request deadline, not http.Server.ReadTimeout, which would also cut long-polls.
	// Default 10 s.
	BodyTimeout time.Duration
	// LongPollsPerUser is how many long-polls (GET /v1/sync with wait) one user may have
	// waiting at once, one per device; past it the request gets 429. A device's new
	// long-poll ends its previous one. Default 8.
	LongPollsPerUser int
	// SendRate and SendBurst limit messages sent per device (per second, token bucket).
	// SendRate 0 turns the limit off. Default 100/s, burst 200.
	SendRate  float64
	SendBurst int
	// RequestRate and RequestBurst limit requests of any kind per device (HTTP calls,
	// WebSocket frames and upgrades). RequestRate 0 turns the limit off. Default 500/s,
	// burst 1000.
	RequestRate  float64
	RequestBurst int
	// FanoutRate and FanoutBurst limit the sync events a device's calls create (per second,
	// token bucket): a send to a group of 500 is 500 events, a direct send 2. The limit is
	// weighed after the fact: the call that creates the events may overdraw the bucket, and
	// the device's next calls get 429 until it has refilled past zero. While it is on, a
	// device's writing calls run one at a time, so that each is weighed before the next is
	// admitted, but for the send frames of one WebSocket connection, up to 32 of which may
	// be in flight together: the debt they run up is bounded by 32 sends' events.
	// FanoutRate 0 turns the limit off. Default 2,000/s, burst 10,000.
	FanoutRate  float64
	FanoutBurst int
	// ConvChangeEvery and ConvChangeBurst bound the metadata changes of one conversation
	// (renames and member changes, by anyone): ConvChangeBurst of them, then one per
	// ConvChangeEvery. A member leaving is never refused. ConvChangeEvery 0 turns the limit
	// off. Default a burst of 10, then one per 6 s.
	ConvChangeEvery time.Duration
	ConvChangeBurst int
	// ConvCreateEvery and ConvCreateBurst bound the conversations one user creates, on all
	// their devices: ConvCreateBurst, then one per ConvCreateEvery. Asking for a direct
	// conversation that already exists does not count. ConvCreateEvery 0 turns the limit off.
	// Default a burst of 20, then one per 10 s.
	ConvCreateEvery time.Duration
	ConvCreateBurst int
	// HistoryRate and HistoryBurst limit the history pages one user reads, on all their
	// devices (per second, token bucket): after a large group's message every online member
	// may pull it, and the pull delay spreads them; this bounds what one user can make the
	// server read. HistoryRate 0 turns the limit off. Default 20/s, burst 100.
	HistoryRate  float64
	HistoryBurst int
	// PullDelayMax bounds the random pull delay a notice of a large group carries (section
	// 10 of the protocol): the members it reaches wait that long, each a different time
	// uniform in [0, PullDelayMax], before they fetch the new messages, so that 15,000 online
	// members do not all pull in the same millisecond. 0 sends no delay. Default 3 s.
	PullDelayMax time.Duration
	// DevLogin enables POST /v1/dev/login, which signs a browser in by user and device name
	// alone (creating the user if needed). For development on a loopback address only:
	// cmd/parley refuses it on any other address, and the endpoint answers only requests of
	// this server's own page on this machine (loopback peer and Host, same Origin, JSON; see
	// devLoginCheck). Off by default; when off the endpoint does not exist (404).
	DevLogin bool
}

// DefaultConfig returns the defaults of docs/protocol.md and of the comments above.
func DefaultConfig() Config {
	return Config{
		HeartbeatInterval: 30 * time.Second,
		IdleTimeout:       75 * time.Second,
		SendQueue:         256,
		WriteTimeout:      10 * time.Second,
		MaxBodyBytes:      1 << 20,
		BodyTimeout:       10 * time.Second,
		LongPollsPerUser:  8,
		SendRate:          100,
		SendBurst:         200,
		RequestRate:       500,
		RequestBurst:      1000,
		FanoutRate:        2000,
		FanoutBurst:       10000,
		ConvChangeEvery:   6 * time.Second,
		ConvChangeBurst:   10,
		ConvCreateEvery:   10 * time.Second,
		ConvCreateBurst:   20,
		HistoryRate:       20,
		HistoryBurst:      100,
		PullDelayMax:      3 * time.Second,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.HeartbeatInterval <= 0 {
		errs = append(errs, errors.New("heartbeat interval must be positive"))
	}
	if c.IdleTimeout <= c.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("idle timeout (%v) must exceed the heartbeat interval (%v)", c.IdleTimeout, c.HeartbeatInterval))
	}
	if c.SendQueue < 1 {
		errs = append(errs, errors.New("send queue must be at least 1"))
	}
	if c.WriteTimeout <= 0 {
		errs = append(errs, errors.New("write timeout must be positive"))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("max body bytes must be positive"))
	}
	if c.BodyTimeout <= 0 {
		errs = append(errs, errors.New("body timeout must be positive"))
	}
	if c.PullDelayMax < 0 {
		errs = append(errs, errors.New("pull delay max must not be negative"))
	}
	if c.LongPollsPerUser < 1 {
		errs = append(errs, errors.New("long-polls per user must be at least 1"))
	}
	errs = append(errs, validRate("send", c.SendRate, c.SendBurst), validRate("request", c.RequestRate, c.RequestBurst),
		validRate("fanout", c.FanoutRate, c.FanoutBurst), validRate("history", c.HistoryRate, c.HistoryBurst),
		validEvery("conversation change", c.ConvChangeEvery, c.ConvChangeBurst),
		validEvery("conversation creation", c.ConvCreateEvery, c.ConvCreateBurst))
	return errors.Join(errs...)
}

func validRate(name string, r float64, burst int) error {
	switch {
	case r < 0 || r != r: // r != r: NaN
		return fmt.Errorf("%s rate must be 0 (off) or positive", name)
	case r > 0 && burst < 1:
		return fmt.Errorf("%s burst must be at least 1 when the %s rate is on", name, name)
	}
	return nil
}

func validEvery(name string, every time.Duration, burst int) error {
	switch {
	case every < 0:
		return fmt.Errorf("%s interval must be 0 (off) or positive", name)
	case every > 0 && burst < 1:
		return fmt.Errorf("%s burst must be at least 1 when the %s limit is on", name, name)
	}
	return nil
}

// perSecond turns "one per every" into a rate for newLimiter (0, off, for 0).
func perSecond(every time.Duration) float64 {
	if every <= 0 {
		return 0
	}
	return 1 / every.Seconds()
}
