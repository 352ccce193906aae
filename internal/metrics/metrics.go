// Package metrics holds Parley's Prometheus instruments on a registry of their own (never
// the global default), and serves them in the Prometheus text format. *Metrics implements
// chat.Observer; the gateway and cmd/parley feed the rest. Every method is safe for
// concurrent use and does nothing on a nil *Metrics, so callers need no nil checks.
package metrics

import (
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/parleychat/parley/internal/bus"
)

// latencyBuckets are fine-grained from 0.1 ms to 1 s (seconds), for ack and commit times.
func latencyBuckets() []float64 {
	return []float64{
		0.0001, 0.00025, 0.0005, 0.00075,
		0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075,
		0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075,
		0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1,
	}
}

// Metrics is the set of Parley's instruments. Create it with New.
type Metrics struct {
	reg *prometheus.Registry

	messagesSent      prometheus.Counter
	messagesDuplicate prometheus.Counter
	ackLatency        prometheus.Histogram
	eventsCommitted   prometheus.Counter
	wsConnections     prometheus.Gauge
	presenceUsers     prometheus.Gauge
	presenceFrames    prometheus.Counter
	presenceBatched   prometheus.Counter
	presenceCoalesced prometheus.Counter
	eventsPushed      prometheus.Counter
	commitBatch       prometheus.Histogram
	commitSeconds     prometheus.Histogram
	longPollsWaiting  prometheus.Gauge
	httpRequests      *prometheus.CounterVec
	responsesCut      prometheus.Counter
	buildInfo         *prometheus.GaugeVec
	busPublishFailed  prometheus.Counter
	busRejected       *prometheus.CounterVec // by reason, one of bus.RejectReasons or "other"

	pushSent      *prometheus.CounterVec // by provider
	pushFailed    *prometheus.CounterVec // by provider and reason
	pushRetried   *prometheus.CounterVec // by provider
	pushGaveUp    *prometheus.CounterVec // by provider
	pushCollapsed prometheus.Counter
	pushRemoved   *prometheus.CounterVec // by provider and reason
	pushLag       prometheus.Histogram

	tierSealed   prometheus.Counter
	tierExpired  prometheus.Counter
	tierSegments prometheus.Counter
	tierRaw      prometheus.Counter
	tierStored   prometheus.Counter
	tierReads    *prometheus.CounterVec // by "hit" or "miss" of the segment cache
	tierPasses   *prometheus.CounterVec // by "ok" or "failed"
	tierLastPass prometheus.Gauge
}

// New returns Metrics registered on a new registry, together with the Go runtime and process
// collectors (process_resident_memory_bytes is read by the load tool).
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		messagesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_messages_sent_total",
			Help: "Messages stored by a send (duplicates not included).",
		}),
		messagesDuplicate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_messages_duplicate_total",
			Help: "Sends answered with the original ack because (sender, client_msg_id) was already stored.",
		}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "parley_ack_latency_seconds",
			Help:    "Time from the start of a send to its durable ack, duplicates included.",
			Buckets: latencyBuckets(),
		}),
		eventsCommitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_events_committed_total",
			Help: "Sync events durably appended to users' event logs.",
		}),
		wsConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parley_ws_connections",
			Help: "Open WebSocket connections.",
		}),
		presenceUsers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parley_presence_users",
			Help: "Users with a device connected to this node (a WebSocket or a waiting long-poll), as presence tracks them.",
		}),
		presenceFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_presence_frames_total",
			Help: "Presence push frames written to WebSocket connections (at most one per connection per second).",
		}),
		presenceBatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_presence_changes_total",
			Help: "Users' presence changes handed to subscribed connections (one per user per connection).",
		}),
		presenceCoalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_presence_coalesced_total",
			Help: "Turns in which a user's presence change was held back to keep to one change per user per 5 s.",
		}),
		eventsPushed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_events_pushed_total",
			Help: "Sync events written to WebSocket connections.",
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "parley_store_commit_batch_size",
			Help:    "Operations per durable store commit (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 .. 2048
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "parley_store_commit_seconds",
			Help:    "Duration of one durable store commit.",
			Buckets: latencyBuckets(),
		}),
		longPollsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parley_longpolls_waiting",
			Help: "GET /v1/sync calls currently waiting for events.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_http_requests_total",
			Help: "HTTP requests answered, by status code (101 for WebSocket upgrades).",
		}, []string{"code"}),
		responsesCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_http_responses_cut_total",
			Help: "HTTP responses cut, and their connections closed, because the client did not read them within the write timeout.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "parley_build_info",
			Help: "Always 1; the labels say which Parley version, storage engine and Go version serve.",
		}, []string{"version", "engine", "go_version"}),
		busPublishFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_bus_publish_failed_total",
			Help: "Wake-ups and notices this node could not publish on the bus (NATS unreachable); readers on other nodes get them on their next sync.",
		}),
		busRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_bus_rejected_total",
			Help: "Bus messages dropped: unopened (unsealed, unknown_key, replayed, stale, forged or malformed: someone on the NATS network without the cluster key, or a retired key), or opened but with fields that do not hold (invalid).",
		}, []string{"reason"}),
		pushSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_push_sent_total",
			Help: "Push notifications accepted by the provider (APNs, FCM, Web Push).",
		}, []string{"provider"}),
		pushFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_push_failed_total",
			Help: "Push notifications the provider rejected for good (dropped; the device stays registered).",
		}, []string{"provider", "reason"}),
		pushRetried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_push_retried_total",
			Help: "Push attempts that failed for now (429, 5xx, network) and will be tried again after a backoff.",
		}, []string{"provider"}),
		pushGaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_push_given_up_total",
			Help: "Push notifications dropped because their event was older than 24 h and the provider still failed.",
		}, []string{"provider"}),
		pushCollapsed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_push_collapsed_total",
			Help: "Notifications not sent because a later message of the same conversation was sent in their place.",
		}),
		pushRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_push_tokens_removed_total",
			Help: "Push registrations removed because the provider said the token is dead.",
		}, []string{"provider", "reason"}),
		pushLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "parley_push_lag_seconds",
			Help:    "Time from an event's commit to the provider's acceptance of its push.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60, 300, 3600},
		}),
		tierSealed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_tier_sealed_messages_total",
			Help: "Messages moved from the hot store into cold segments.",
		}),
		tierExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_tier_expired_messages_total",
			Help: "Messages deleted by retention (the operator's or a group's own), hot or cold.",
		}),
		tierSegments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_tier_segments_total",
			Help: "Cold segments sealed.",
		}),
		tierRaw: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_tier_raw_bytes_total",
			Help: "Encoded size of the sealed messages before compression (with parley_tier_stored_bytes_total, the compression ratio).",
		}),
		tierStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parley_tier_stored_bytes_total",
			Help: "Bytes of cold segments written to the blob store.",
		}),
		tierReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_tier_segment_reads_total",
			Help: "Reads that needed a cold segment, by whether the segment cache had it (hit) or the blob store was read (miss).",
		}, []string{"cache"}),
		tierPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parley_tier_passes_total",
			Help: "Passes of the tiering job, by outcome.",
		}, []string{"outcome"}),
		tierLastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parley_tier_last_pass_timestamp_seconds",
			Help: "When the latest tiering pass ended (Unix seconds); with the passes' outcomes, whether the job keeps up.",
		}),
	}
	m.reg.MustRegister(
		m.tierSealed, m.tierExpired, m.tierSegments, m.tierRaw, m.tierStored, m.tierReads, m.tierPasses, m.tierLastPass,
		m.pushSent, m.pushFailed, m.pushRetried, m.pushGaveUp, m.pushCollapsed, m.pushRemoved, m.pushLag,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.messagesSent, m.messagesDuplicate, m.ackLatency, m.eventsCommitted,
		m.wsConnections, m.eventsPushed, m.commitBatch, m.commitSeconds,
		m.presenceUsers, m.presenceFrames, m.presenceBatched, m.presenceCoalesced,
		m.longPollsWaiting, m.httpRequests, m.responsesCut, m.buildInfo, m.busPublishFailed, m.busRejected,
	)
	for _, r := range bus.RejectReasons { // every reason shows, at 0, from the start
		m.busRejected.WithLabelValues(r)
	}
	return m
}

// SetBuildInfo publishes what this node runs as parley_build_info, so that whoever reads the
// metrics (a dashboard, `parley-bench --server`) can tell what it measured.
func (m *Metrics) SetBuildInfo(version, engine string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, engine, runtime.Version()).Set(1)
}

// Registry returns the registry the instruments live on, for callers that add collectors
// of their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format. It needs no credentials.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// MessageStored records one answered send: d is the time to its durable ack (chat.Observer).
func (m *Metrics) MessageStored(d time.Duration, duplicate bool) {
	if m == nil {
		return
	}
	if duplicate {
		m.messagesDuplicate.Inc()
	} else {
		m.messagesSent.Inc()
	}
	m.ackLatency.Observe(d.Seconds())
}

// EventsCommitted records n sync events durably committed (chat.Observer).
func (m *Metrics) EventsCommitted(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.eventsCommitted.Add(float64(n))
}

// BusPublishFailed counts one publish the bus refused (chat's optional observer of the bus).
func (m *Metrics) BusPublishFailed() {
	if m != nil {
		m.busPublishFailed.Inc()
	}
}

// BusRejected counts one bus message dropped: unopened (bus.SealOptions.OnReject), or
// opened and refused by chat's checks. A reason outside bus.RejectReasons counts as
// "other", so the label set stays fixed.
func (m *Metrics) BusRejected(reason string) {
	if m == nil {
		return
	}
	if !slices.Contains(bus.RejectReasons, reason) {
		reason = "other"
	}
	m.busRejected.WithLabelValues(reason).Inc()
}

// ObserveCommit records one durable store commit of batch operations that took d. cmd/parley
// hooks it to the store.
func (m *Metrics) ObserveCommit(batch int, d time.Duration) {
	if m == nil {
		return
	}
	m.commitBatch.Observe(float64(batch))
	m.commitSeconds.Observe(d.Seconds())
}

// SetPresenceUsers sets how many users have a device connected here.
func (m *Metrics) SetPresenceUsers(n int) {
	if m != nil {
		m.presenceUsers.Set(float64(n))
	}
}

// PresenceFrameSent counts a presence push frame written to a connection.
func (m *Metrics) PresenceFrameSent() {
	if m != nil {
		m.presenceFrames.Inc()
	}
}

// PresenceFrame counts users' changes handed to one connection (presence.Observer).
func (m *Metrics) PresenceFrame(users int) {
	if m != nil {
		m.presenceBatched.Add(float64(users))
	}
}

// PresenceCoalesced counts a change held back (presence.Observer).
func (m *Metrics) PresenceCoalesced() {
	if m != nil {
		m.presenceCoalesced.Inc()
	}
}

// ConnectionOpened counts a WebSocket connection as open.
func (m *Metrics) ConnectionOpened() {
	if m != nil {
		m.wsConnections.Inc()
	}
}

// ConnectionClosed counts a WebSocket connection as closed.
func (m *Metrics) ConnectionClosed() {
	if m != nil {
		m.wsConnections.Dec()
	}
}

// EventsPushed records n events written to WebSocket connections.
func (m *Metrics) EventsPushed(n int) {
	if m != nil && n > 0 {
		m.eventsPushed.Add(float64(n))
	}
}

// LongPollStarted counts a sync long-poll as waiting; pair it with LongPollEnded.
func (m *Metrics) LongPollStarted() {
	if m != nil {
		m.longPollsWaiting.Inc()
	}
}

// LongPollEnded counts a sync long-poll as no longer waiting.
func (m *Metrics) LongPollEnded() {
	if m != nil {
		m.longPollsWaiting.Dec()
	}
}

// HTTPRequest counts one HTTP request answered with status code.
func (m *Metrics) HTTPRequest(code int) {
	if m != nil {
		m.httpRequests.WithLabelValues(strconv.Itoa(code)).Inc()
	}
}

// ResponseCut counts one HTTP response cut because the client did not read it in time.
func (m *Metrics) ResponseCut() {
	if m != nil {
		m.responsesCut.Inc()
	}
}

// Pushed counts a push the provider accepted, lag after its event's commit.
func (m *Metrics) PushSent(provider string, lag time.Duration) {
	m.pushSent.WithLabelValues(provider).Inc()
	m.pushLag.Observe(lag.Seconds())
}

// Failed counts a push the provider rejected for good.
func (m *Metrics) PushFailed(provider, reason string) {
	m.pushFailed.WithLabelValues(provider, reasonLabel(reason)).Inc()
}

// Retried counts a push attempt that will be tried again.
func (m *Metrics) PushRetried(provider string) { m.pushRetried.WithLabelValues(provider).Inc() }

// GaveUp counts a push dropped after 24 h of failures.
func (m *Metrics) PushGaveUp(provider string) { m.pushGaveUp.WithLabelValues(provider).Inc() }

// Collapsed counts notifications replaced by a later one of their conversation.
func (m *Metrics) PushCollapsed(n int) { m.pushCollapsed.Add(float64(n)) }

// TokenRemoved counts a dead token's registration removed.
func (m *Metrics) PushTokenRemoved(provider, reason string) {
	m.pushRemoved.WithLabelValues(provider, reasonLabel(reason)).Inc()
}

// reasonLabel keeps a reason usable as a label: short, and one bucket for the unexpected.
// The pusher already gives only reasons from fixed sets (the documented provider reasons, a
// Web Push status: never a service's text), so this is a second guard, not the bound.
func reasonLabel(r string) string {
	if len(r) == 0 || len(r) > 40 {
		return "other"
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "other"
		}
	}
	return r
}

// SegmentSealed counts a sealed segment of n messages (tier.Observer).
func (m *Metrics) SegmentSealed(n int, raw, stored int64) {
	m.tierSealed.Add(float64(n))
	m.tierSegments.Inc()
	m.tierRaw.Add(float64(raw))
	m.tierStored.Add(float64(stored))
}

// MessagesExpired counts messages deleted by retention (tier.Observer).
func (m *Metrics) MessagesExpired(n int) { m.tierExpired.Add(float64(n)) }

// SegmentRead counts a read of a cold segment (tier.Observer).
func (m *Metrics) SegmentRead(hit bool) {
	if hit {
		m.tierReads.WithLabelValues("hit").Inc()
	} else {
		m.tierReads.WithLabelValues("miss").Inc()
	}
}

// TierPass counts a tiering pass (tier.Observer).
func (m *Metrics) TierPass(sealed int, failed bool) {
	if failed {
		m.tierPasses.WithLabelValues("failed").Inc()
	} else {
		m.tierPasses.WithLabelValues("ok").Inc()
	}
	m.tierLastPass.SetToCurrentTime()
}
