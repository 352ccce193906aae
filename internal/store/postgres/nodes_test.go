package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// TestNodesShareTheStore runs three Stores on one schema, as three nodes on one database
// do, each with senders appending to shared conversations (direct, a write-fanout group,
// a read-fanout group), retries of the same client ids sent through other nodes at once,
// and Updates that raise positions and append to the same users' logs. Afterwards every
// conversation's seqs are 1..max_seq, every client id is stored once and every retry got
// the original back, every user's cursors are 1..last with each message of their
// write-fanout conversations exactly once, and the mark counts the read-fanout messages.
func TestNodesShareTheStore(t *testing.T) {
	key := t.TempDir()
	nodes := make([]*Store, 3)
	for i := range nodes {
		nodes[i] = openTest(t, key, Options{MaxConns: 4})
	}
	ctx := t.Context()
	users := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	convs := map[string][]string{ // conversation -> members
		"d01": {"u0", "u1"}, "d12": {"u1", "u2"}, "d34": {"u3", "u4"},
		"g": users, "r": users,
	}
	if err := nodes[0].Update(ctx, func(tx store.Tx) error { return putNodesFixture(tx, users, convs) }); err != nil {
		t.Fatal(err)
	}
	memberOf := map[string][]string{}
	for id, ms := range convs {
		for _, u := range ms {
			memberOf[u] = append(memberOf[u], id)
		}
	}

	type sent struct {
		conv, sender, id string
	}
	var (
		mu      sync.Mutex
		answers = map[sent][]store.Appended{} // every answer to each client id
		errs    []error
		wg      sync.WaitGroup
		record  = func(k sent, res store.Appended, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%v: %w", k, err))
				return
			}
			answers[k] = append(answers[k], res)
		}
	)
	const perSender = 60
	for n, node := range nodes {
		for g, u := range users {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(g)))
				for j := range perSender {
					k := sent{conv: memberOf[u][rng.IntN(len(memberOf[u]))], sender: u, id: fmt.Sprintf("n%d-%d", n, j)}
					m := store.Message{ConvID: k.conv, SenderID: u, ClientMsgID: k.id, MsgID: fmt.Sprintf("m-%s-%s", u, k.id),
						ContentType: 1, Content: []byte(`{"text":"x"}`), CreatedAt: int64(j)}
					if j%10 == 9 { // the same message through the next node, at once: a client's retry elsewhere
						other := nodes[(n+1)%len(nodes)]
						var inner sync.WaitGroup
						inner.Go(func() {
							res, err := other.AppendMessage(ctx, m)
							record(k, res, err)
						})
						res, err := node.AppendMessage(ctx, m)
						inner.Wait()
						record(k, res, err)
						continue
					}
					res, err := node.AppendMessage(ctx, m)
					record(k, res, err)
				}
			})
		}
		wg.Go(func() { // reads: a position and a "read" event, in the same users' rows
			rng := rand.New(rand.NewPCG(uint64(n), 99))
			for j := range 100 {
				u := users[rng.IntN(len(users))]
				c := memberOf[u][rng.IntN(len(memberOf[u]))]
				err := node.Update(ctx, func(tx store.Tx) error {
					if _, _, err := tx.AdvancePositions(ctx, c, u, int64(j), int64(j)); err != nil {
						return err
					}
					_, err := tx.AppendEvent(ctx, store.Event{UserID: u, Type: "read", ConvID: c, Data: []byte(`{}`)})
					return err
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("read update: %w", err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	first := map[sent]store.Message{} // the message each client id stored
	for k, as := range answers {
		originals := 0
		for _, a := range as {
			if !a.Duplicate {
				originals++
			}
			if a.Message.Seq != as[0].Message.Seq || a.Message.MsgID != as[0].Message.MsgID {
				errs = append(errs, fmt.Errorf("%v answered both seq %d %s and seq %d %s", k,
					as[0].Message.Seq, as[0].Message.MsgID, a.Message.Seq, a.Message.MsgID))
			}
		}
		if originals != 1 {
			errs = append(errs, fmt.Errorf("%v: %d of its %d answers say it was stored then, want 1", k, originals, len(as)))
		}
		first[k] = as[0].Message
	}
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	readFanout := 0
	err := nodes[2].View(ctx, func(tx store.ReadTx) error {
		stored := map[string]map[int64]store.Message{}
		for id := range convs {
			c, err := tx.Conversation(ctx, id)
			if err != nil {
				return err
			}
			ms, err := tx.Messages(ctx, id, store.MessageRange{Limit: 100000})
			if err != nil {
				return err
			}
			if int64(len(ms)) != c.MaxSeq {
				t.Errorf("%s: %d messages, max_seq %d", id, len(ms), c.MaxSeq)
			}
			stored[id] = map[int64]store.Message{}
			for i, m := range ms {
				if m.Seq != int64(i+1) {
					t.Fatalf("%s: seqs are not 1..%d: message %d has seq %d", id, len(ms), i, m.Seq)
				}
				stored[id][m.Seq] = m
			}
			if id == "r" {
				readFanout = len(ms)
			}
		}
		count := map[string]int{}
		for k, m := range first {
			got, ok := stored[k.conv][m.Seq]
			if !ok || got.ClientMsgID != k.id || got.SenderID != k.sender || got.MsgID != m.MsgID {
				t.Errorf("%v acked as seq %d %s, stored as %+v", k, m.Seq, m.MsgID, got)
			}
			count[k.conv]++
		}
		for id := range convs {
			if count[id] != len(stored[id]) {
				t.Errorf("%s: %d messages stored, %d client ids acked", id, len(stored[id]), count[id])
			}
		}
		for _, u := range users {
			b, err := tx.Cursors(ctx, u)
			if err != nil {
				return err
			}
			evs, err := tx.Events(ctx, u, 0, 1<<20)
			if err != nil {
				return err
			}
			if int64(len(evs)) != b.Last {
				t.Errorf("%s: %d events, last cursor %d", u, len(evs), b.Last)
			}
			seen := map[string]map[int64]bool{}
			for i, e := range evs {
				if e.Cursor != int64(i+1) {
					t.Fatalf("%s: cursors are not 1..%d: event %d has cursor %d", u, len(evs), i, e.Cursor)
				}
				if e.Type != store.EventMessage {
					continue
				}
				if seen[e.ConvID] == nil {
					seen[e.ConvID] = map[int64]bool{}
				}
				if seen[e.ConvID][e.Seq] {
					t.Errorf("%s: message %s/%d twice in the log", u, e.ConvID, e.Seq)
				}
				seen[e.ConvID][e.Seq] = true
			}
			for _, c := range memberOf[u] {
				if c == "r" {
					if len(seen[c]) != 0 {
						t.Errorf("%s: %d events of the read-fanout conversation", u, len(seen[c]))
					}
					continue
				}
				if len(seen[c]) != len(stored[c]) {
					t.Errorf("%s: %d message events of %s, which holds %d", u, len(seen[c]), c, len(stored[c]))
				}
			}
		}
		_, mark, err := tx.ReadFanoutChanges(ctx, "u0", 0)
		if err != nil {
			return err
		}
		if mark != int64(readFanout) {
			t.Errorf("the latest mark is %d after %d read-fanout messages, one mark each", mark, readFanout)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d client ids acked over 3 nodes (%d in the read-fanout group)", len(first), readFanout)
}

// putNodesFixture creates the users and the group conversations (id -> members, in
// ordinal order); "r" is read-fanout, the others write-fanout.
func putNodesFixture(tx store.Tx, users []string, convs map[string][]string) error {
	ctx := context.Background()
	for _, u := range users {
		if err := tx.CreateUser(ctx, store.User{ID: u, Name: u, TokenGen: 1}); err != nil {
			return err
		}
	}
	for id, ms := range convs {
		c := store.Conversation{ID: id, Type: protocol.TypeGroup, MembersCount: len(ms)}
		if id == "r" {
			c.ReadFrom = 1
		}
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		for i, u := range ms {
			if err := tx.PutMember(ctx, store.Member{ConvID: id, UserID: u, Ordinal: int64(i + 1)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// putNodesAttachment stores u0's attachment "a", complete, created at at.
func putNodesAttachment(tx store.Tx, at int64) error {
	ctx := context.Background()
	if err := tx.CreateAttachment(ctx, store.Attachment{ID: "a", OwnerID: "u0", Size: 1, CreatedAt: at}); err != nil {
		return err
	}
	return tx.CompleteAttachment(ctx, "a", store.AttachmentMeta{MimeType: "image/png", CompletedAt: at})
}

// TestNodesCountOneAttachment sends one attachment from two Stores on one schema at once,
// then recalls every message through both at once (each recall twice, as two nodes
// handling a client's retry would) while more sends of it go on, and a collector's
// MarkAttachmentDeleting runs throughout. The count must come out exact, since the
// collector deletes at zero: Refs is the number of messages that still carry it, which
// AttachmentRefs lists, and the attachment was never marked deleting while it was sent.
func TestNodesCountOneAttachment(t *testing.T) {
	key := t.TempDir()
	nodes := []*Store{openTest(t, key, Options{MaxConns: 4}), openTest(t, key, Options{MaxConns: 4})}
	ctx := t.Context()
	users := []string{"u0", "u1", "u2"}
	const at = 1_700_000_000_000
	err := nodes[0].Update(ctx, func(tx store.Tx) error {
		if err := putNodesFixture(tx, users, map[string][]string{"g": users, "r": users}); err != nil {
			return err
		}
		return putNodesAttachment(tx, at)
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		errs []error
		sent = map[store.MessageRef]bool{}
		fail = func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	)
	send := func(node *Store, conv, clientID string) {
		m := store.Message{ConvID: conv, SenderID: "u0", ClientMsgID: clientID, MsgID: "m-" + clientID,
			ContentType: 2, Content: []byte(`{"attachment_id":"a"}`), CreatedAt: at, AttachmentID: "a"}
		res, err := node.AppendMessage(ctx, m)
		if err != nil {
			fail(fmt.Errorf("send %s: %w", clientID, err))
			return
		}
		mu.Lock()
		sent[store.MessageRef{ConvID: conv, Seq: res.Message.Seq}] = true
		mu.Unlock()
	}
	const perSender = 25
	var wg sync.WaitGroup
	for n, node := range nodes {
		for _, conv := range []string{"g", "r"} {
			wg.Go(func() {
				for j := range perSender {
					send(node, conv, fmt.Sprintf("%s-n%d-%d", conv, n, j))
				}
			})
		}
	}
	wg.Wait()
	check := func(what string, wantRefs int64) {
		t.Helper()
		err := nodes[1].View(ctx, func(tx store.ReadTx) error {
			a, err := tx.Attachment(ctx, "a")
			if err != nil {
				return err
			}
			refs, err := tx.AttachmentRefs(ctx, "a", "", 0, 1<<20)
			if err != nil {
				return err
			}
			if a.Refs != wantRefs || int64(len(refs)) != wantRefs || a.State != store.AttachmentComplete {
				t.Errorf("%s: Refs %d, %d messages carrying it, state %d; want %d, %d and complete",
					what, a.Refs, len(refs), a.State, wantRefs, wantRefs)
			}
			if (a.IdleSince == 0) != (wantRefs > 0) {
				t.Errorf("%s: IdleSince %d with Refs %d", what, a.IdleSince, a.Refs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("after concurrent sends", 4*perSender)

	// Every message recalled through both nodes at once, while each node sends more and a
	// collector tries to mark the attachment deleting.
	mu.Lock()
	first := make([]store.MessageRef, 0, len(sent))
	for ref := range sent {
		first = append(first, ref)
	}
	mu.Unlock()
	stop := make(chan struct{})
	var collector sync.WaitGroup
	collector.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := nodes[0].Update(ctx, func(tx store.Tx) error {
				ok, err := tx.MarkAttachmentDeleting(ctx, "a", at+1)
				if ok {
					return fmt.Errorf("marked deleting while sent")
				}
				return err
			})
			if err != nil {
				fail(fmt.Errorf("collector: %w", err))
				return
			}
		}
	})
	for _, ref := range first {
		for _, node := range nodes {
			wg.Go(func() {
				err := node.Update(ctx, func(tx store.Tx) error { return tx.RecallMessage(ctx, ref.ConvID, ref.Seq, at+5) })
				if err != nil {
					fail(fmt.Errorf("recall %v: %w", ref, err))
				}
			})
		}
	}
	for n, node := range nodes {
		wg.Go(func() {
			for j := range perSender {
				send(node, []string{"g", "r"}[j%2], fmt.Sprintf("late-n%d-%d", n, j))
			}
		})
	}
	wg.Wait()
	close(stop)
	collector.Wait()
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	check("after concurrent recalls and sends", int64(len(sent)-len(first)))

	// The late ones recalled too: nothing carries it, idle since the last recall.
	for ref := range sent {
		if err := nodes[ref.Seq%2].Update(ctx, func(tx store.Tx) error {
			return tx.RecallMessage(ctx, ref.ConvID, ref.Seq, at+9)
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("after every message recalled", 0)
	var a store.Attachment
	if err := nodes[0].View(ctx, func(tx store.ReadTx) error {
		var err error
		a, err = tx.Attachment(ctx, "a")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if a.IdleSince != at+9 {
		t.Errorf("IdleSince %d after the last recall, want %d", a.IdleSince, int64(at+9))
	}
}
