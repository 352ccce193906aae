package chat

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/bus"
)

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
	c := newCluster(New(Options{}), rec)
	for _, cursor := range []int64{1, 42, math.MaxInt64} {
		rec.published = nil
		c.wake("a.user@x", cursor)
		want, err := json.Marshal(busMsg{Node: c.node, Kind: kindWake, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.published) != 1 || string(rec.published[0]) != string(want) {
			t.Fatalf("wake(%d) published %q, want %q", cursor, rec.published, want)
		}
	}
}
