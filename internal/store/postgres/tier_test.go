package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// TestNodesSealWhileRecalling runs a tiering pass on one Store while two others recall
// every other message of the conversation at once, each recall twice, as nodes handling a
// client's retry do: a message still hot is recalled in place, one sealed meanwhile gets a
// recalled overlay. The pass counts the recalls it reads and seals; a recall that slips in
// after its read must make SealSegment refuse (ErrConflict), never be lost. Afterwards the
// attachment is counted once for each message never recalled, which AttachmentRefs lists,
// whichever tier each ended in.
func TestNodesSealWhileRecalling(t *testing.T) {
	key := t.TempDir()
	nodes := []*Store{openTest(t, key, Options{MaxConns: 4}), openTest(t, key, Options{MaxConns: 4}),
		openTest(t, key, Options{MaxConns: 4})}
	ctx := t.Context()
	users := []string{"u0", "u1"}
	const at, n, per = 1_700_000_000_000, 48, 4
	err := nodes[0].Update(ctx, func(tx store.Tx) error {
		if err := putNodesFixture(tx, users, map[string][]string{"g": users}); err != nil {
			return err
		}
		return putNodesAttachment(tx, at)
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(seq int64) store.Message {
		id := fmt.Sprintf("k%d", seq)
		return store.Message{ConvID: "g", Seq: seq, SenderID: "u0", ClientMsgID: id, MsgID: "m-" + id,
			ContentType: 2, Content: []byte(`{"attachment_id":"a"}`), CreatedAt: at + seq, AttachmentID: "a"}
	}
	for seq := int64(1); seq <= n; seq++ {
		if res, err := nodes[0].AppendMessage(ctx, msg(seq)); err != nil || res.Message.Seq != seq {
			t.Fatalf("append %d: seq %d, %v", seq, res.Message.Seq, err)
		}
	}

	var (
		mu        sync.Mutex
		errs      []error
		conflicts int
		wg        sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Go(func() { // the tiering pass
		for first := int64(1); first <= n; first += per {
			seg := store.Segment{ConvID: "g", FirstSeq: first, LastSeq: first + per - 1, FirstTS: at + first,
				LastTS: at + first + per - 1, Key: fmt.Sprintf("seg-%03d", first), Count: per}
			if err := nodes[0].Update(ctx, func(tx store.Tx) error { return tx.AddSegment(ctx, seg) }); err != nil {
				fail(err)
				return
			}
			for {
				err := nodes[0].Update(ctx, func(tx store.Tx) error {
					ms, err := tx.Messages(ctx, "g", store.MessageRange{AfterSeq: first - 1, Limit: per})
					if err != nil {
						return err
					}
					recalled := 0
					for _, m := range ms {
						if m.Recalled {
							recalled++
						}
					}
					return tx.SealSegment(ctx, seg.Key, recalled)
				})
				if errors.Is(err, store.ErrConflict) {
					mu.Lock()
					conflicts++
					mu.Unlock()
					continue // read again: the recalls only go forward
				}
				if err != nil {
					fail(fmt.Errorf("seal %s: %w", seg.Key, err))
					return
				}
				break
			}
		}
	})
	for seq := int64(2); seq <= n; seq += 2 {
		for _, node := range nodes[1:] {
			wg.Go(func() {
				err := node.Update(ctx, func(tx store.Tx) error {
					err := tx.RecallMessage(ctx, "g", seq, at+100)
					if !errors.Is(err, store.ErrNotFound) {
						return err
					}
					m := msg(seq) // sealed meanwhile: its recalled version goes to the overlay
					m.Recalled, m.Content, m.Extra = true, nil, nil
					return tx.PutOverlay(ctx, m, at+100)
				})
				if err != nil {
					fail(fmt.Errorf("recall %d: %w", seq, err))
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d seals refused by a recall after their read", conflicts)

	err = nodes[1].View(ctx, func(tx store.ReadTx) error {
		a, err := tx.Attachment(ctx, "a")
		if err != nil {
			return err
		}
		refs, err := tx.AttachmentRefs(ctx, "a", "", 0, 1000)
		if err != nil {
			return err
		}
		var want []store.MessageRef
		for seq := int64(1); seq <= n; seq += 2 {
			want = append(want, store.MessageRef{ConvID: "g", Seq: seq})
		}
		if a.Refs != n/2 || fmt.Sprint(refs) != fmt.Sprint(want) {
			t.Errorf("Refs %d, AttachmentRefs %v; want %d, %v", a.Refs, refs, n/2, want)
		}
		hot, err := tx.Messages(ctx, "g", store.MessageRange{Limit: 1000})
		if err != nil || len(hot) != 0 {
			t.Errorf("hot messages after sealing all: %d, %v", len(hot), err)
		}
		last, err := tx.LastSegment(ctx, "g")
		if err != nil || last.LastSeq != n {
			t.Errorf("LastSegment %+v, %v; want one ending at %d", last, err, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
