package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
)

var _ chat.Observer = (*Metrics)(nil)

func TestMetricsExposition(t *testing.T) {
	m := New()
	m.MessageStored(2*time.Millisecond, false)
	m.MessageStored(time.Millisecond, true)
	m.EventsCommitted(3)
	m.ObserveCommit(8, 3*time.Millisecond)
	m.ConnectionOpened()
	m.EventsPushed(2)
	m.LongPollStarted()
	m.HTTPRequest(200)
	m.HTTPRequest(429)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		"parley_messages_sent_total 1",
		"parley_messages_duplicate_total 1",
		"parley_ack_latency_seconds_count 2",
		`parley_ack_latency_seconds_bucket{le="0.0001"} 0`,
		"parley_events_committed_total 3",
		"parley_ws_connections 1",
		"parley_events_pushed_total 2",
		"parley_store_commit_batch_size_sum 8",
		"parley_store_commit_seconds_count 1",
		"parley_longpolls_waiting 1",
		`parley_http_requests_total{code="429"} 1`,
		"process_resident_memory_bytes",
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.MessageStored(time.Millisecond, false)
	m.EventsCommitted(1)
	m.ObserveCommit(1, time.Millisecond)
	m.ConnectionOpened()
	m.ConnectionClosed()
	m.EventsPushed(1)
	m.LongPollStarted()
	m.LongPollEnded()
	m.HTTPRequest(200)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 404 {
		t.Fatalf("nil handler answered %d", rec.Code)
	}
}

func TestRegistriesAreSeparate(t *testing.T) {
	a, b := New(), New() // would panic on duplicate registration with a shared registry
	a.HTTPRequest(200)
	if a.Registry() == b.Registry() {
		t.Fatal("two Metrics share a registry")
	}
}

// The reasons of parley_bus_rejected_total are a fixed set, all shown from the start: a
// reason from anywhere else counts as "other" rather than growing the exposition.
func TestBusRejectedLabels(t *testing.T) {
	m := New()
	m.BusRejected("forged")
	m.BusRejected("forged")
	m.BusRejected("made up by someone")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`parley_bus_rejected_total{reason="forged"} 2`,
		`parley_bus_rejected_total{reason="other"} 1`,
		`parley_bus_rejected_total{reason="unsealed"} 0`,
		`parley_bus_rejected_total{reason="stale"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if strings.Contains(text, "made up") {
		t.Error("an outside reason became a label")
	}
	var nilMetrics *Metrics
	nilMetrics.BusRejected("forged")
}
