package live

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/tasks"
)

// testCluster is a Cluster on b, with h (a new hub if nil), whose tasks end with the test.
func testCluster(tb testing.TB, b bus.Bus, h *hub.Hub) *Cluster {
	tb.Helper()
	if h == nil {
		h = hub.New()
	}
	g := tasks.New()
	tb.Cleanup(g.Close)
	return NewCluster(ClusterOptions{Bus: b, Hub: h, Node: "n_test", Tasks: g})
}

// recordingBus keeps what is published.
type recordingBus struct {
	bus.Bus
	published [][]byte
}

func (b *recordingBus) Publish(_ context.Context, _ string, data []byte) error {
	b.published = append(b.published, slices.Clone(data))
	return nil
}

// TestWakeEncodedAsJSONWould: the hand-encoded wake-up is what encoding/json makes of it.
func TestWakeEncodedAsJSONWould(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	rec := &recordingBus{Bus: m}
	c := testCluster(t, rec, nil)
	for _, cursor := range []int64{1, 42, math.MaxInt64} {
		rec.published = nil
		c.Wake("a.user@x", cursor)
		want, err := json.Marshal(busMsg{Node: c.node, Kind: kindWake, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.published) != 1 || string(rec.published[0]) != string(want) {
			t.Fatalf("wake(%d) published %q, want %q", cursor, rec.published, want)
		}
	}
}

// TestEventEncodedAsJSONWould: the hand-encoded message event is what encoding/json makes
// of it, and decodes to the body it was made from.
func TestEventEncodedAsJSONWould(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	rec := &recordingBus{Bus: m}
	c := testCluster(t, rec, nil)
	body := &hub.Body{Type: "message", ConvID: "g_\"odd\u2028id", TS: 1_700_000_000_123,
		Data: []byte(`{"conv_id":"g_x","seq":7,"content":{"text":"h\u00e9"}}`)}
	c.Event("a.user@x", 42, body)
	want, err := json.Marshal(busMsg{Node: c.node, Kind: kindEvent, Cursor: 42, TS: body.TS, Type: body.Type, Conv: body.ConvID, Data: body.Data})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.published) != 1 || string(rec.published[0]) != string(want) {
		t.Fatalf("event published %q, want %q", rec.published, want)
	}
	var got busMsg
	if err := json.Unmarshal(rec.published[0], &got); err != nil || got.Conv != body.ConvID || string(got.Data) != string(body.Data) {
		t.Fatalf("decoded %+v, %v", got, err)
	}
}
