// Package chattest holds the benchmarks of package chat that every store backend runs
// unchanged from its own tests, the way storetest's conformance suite is shared: the body
// is written once here, and each backend's _test.go only says how to open a store. They
// measure the write path as a client meets it, chat.Service.Send through a real, durable
// store: the dedup lookup, the membership check, the write fanout of one event per member
// and the fsynced group commit.
//
//	func BenchmarkSend(b *testing.B) {
//		chattest.BenchSend(b, func(b *testing.B) store.Store { return openTest(b, Options{}) })
//	}
package chattest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Senders is how many sends the benchmarks keep in flight at once. Group commit shares one
// fsync among the sends queued while the previous one ran, so a single sender would only
// measure the disk's sync latency; a server has many clients sending at once.
const Senders = 64

// sendCase is one shape of traffic.
type sendCase struct {
	name    string
	convs   int // conversations the sends are spread over, uniformly at random
	members int // members of each conversation; 2 is a direct conversation
}

// sendCases are the shapes BenchSend measures: every send into one hot conversation (its
// pages stay in cache and one commit rewrites them once for the whole batch), sends spread
// over many conversations (each send of a batch dirties pages of its own: cold pages), and
// a full-size group, where one send is 500 events.
func sendCases() []sendCase {
	return []sendCase{
		{"Direct/Convs=1", 1, 2},
		{"Direct/Convs=10000", 10_000, 2},
		{"Group/Members=500", 1, 500},
	}
}

// BenchSend benchmarks chat.Service.Send. open must return a fresh, empty store in its
// durable mode (fsync per commit) and close it at b's cleanup; it is called once per case
// and per -count, and the fixture it sets up is not timed. Each case reports msgs/s,
// events/s (one per member and message) and setup-s, the seconds its setup took.
func BenchSend(b *testing.B, open func(b *testing.B) store.Store) {
	for _, c := range sendCases() {
		b.Run(c.name, func(b *testing.B) { benchSend(b, open(b), c) })
	}
}

// benchSend measures one case. b.Loop runs the function once per -count, so the fixture is
// built once per measurement, and Loop's first call starts the timer after it.
func benchSend(b *testing.B, st store.Store, c sendCase) {
	ctx := b.Context()
	start := time.Now()
	fx, err := setup(ctx, st, c)
	if err != nil {
		b.Fatalf("setup: %v", err)
	}
	setupTime := time.Since(start)
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		sem  = make(chan struct{}, Senders)
		errs = make(chan error, 1)
	)
	cpu0 := cpuTime()
	for b.Loop() {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fx.send(ctx, n.Add(1)); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	b.StartTimer() // the sends still in flight are part of the measurement
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	select {
	case err := <-errs:
		b.Fatalf("send: %v", err)
	default:
	}
	if err := fx.check(ctx, st, b.N); err != nil {
		b.Fatal(err)
	}
	msgs := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(msgs, "msgs/s")
	b.ReportMetric(msgs*float64(c.members), "events/s")
	b.ReportMetric(setupTime.Seconds(), "setup-s")
	if cpu > 0 {
		// CPU per message is steadier than msgs/s on a shared machine, and it is what
		// bounds msgs/s once the cores are busy.
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
	}
}

// fixture is the state a case sends into.
type fixture struct {
	svc   *chat.Service
	convs []conv
}

// conv is one conversation of the fixture and the users who may send into it.
type conv struct {
	id      string
	members []string
}

// send sends message n from a random member into a random conversation of the fixture.
// Every client_msg_id is new, so the dedup lookup misses as it does for first sends.
func (fx *fixture) send(ctx context.Context, n int64) error {
	c := fx.convs[rand.IntN(len(fx.convs))]
	sender := c.members[rand.IntN(len(c.members))]
	_, err := fx.svc.Send(ctx, chat.Identity{UserID: sender, DeviceID: "bench"}, protocol.SendRequest{
		ConvID: c.id, ClientMsgID: "b" + strconv.FormatInt(n, 10),
		ContentType: 1, Content: []byte(`{"text":"hello, world"}`),
	})
	return err
}

// check confirms that the sends stored what they claim: the conversations' seqs add up to
// the number of sends, so a Send that answered without storing cannot pass for a fast one.
func (fx *fixture) check(ctx context.Context, st store.Store, sent int) error {
	return st.View(ctx, func(tx store.ReadTx) error {
		stored := int64(0)
		for _, c := range fx.convs {
			row, err := tx.Conversation(ctx, c.id)
			if err != nil {
				return err
			}
			stored += row.MaxSeq
		}
		if stored != int64(sent) {
			return fmt.Errorf("%d messages stored after %d sends", stored, sent)
		}
		return nil
	})
}

// setup creates c's users and conversations through the Service, so that the stored rows,
// ids and events are exactly what a running server holds. The calls run Senders at a time:
// group commit makes 20,000 users and 10,000 conversations a matter of seconds.
func setup(ctx context.Context, st store.Store, c sendCase) (*fixture, error) {
	fx := &fixture{svc: chat.New(chat.Options{Store: st, Config: chat.DefaultConfig()})}
	users := c.convs * c.members
	if c.members > 2 {
		users = c.members // one group, whatever c.convs says
	}
	err := concurrently(users, func(i int) error {
		_, _, err := fx.svc.CreateUser(ctx, userID(i), "")
		return err
	})
	if err != nil {
		return nil, err
	}
	if c.members > 2 {
		fx.convs, err = createGroup(ctx, fx.svc, c.members)
	} else {
		fx.convs, err = createDirects(ctx, fx.svc, c.convs)
	}
	return fx, err
}

// createGroup creates one group of users 0 to members-1, owned by user 0.
func createGroup(ctx context.Context, svc *chat.Service, members int) ([]conv, error) {
	ids := make([]string, members)
	for i := range ids {
		ids[i] = userID(i)
	}
	b, err := svc.CreateConversation(ctx, chat.Identity{UserID: ids[0], DeviceID: "bench"},
		protocol.CreateConversationRequest{Type: protocol.TypeGroup, Name: "bench", Members: ids[1:]})
	if err != nil {
		return nil, err
	}
	return []conv{{id: b.ConvID, members: ids}}, nil
}

// createDirects creates n direct conversations, conversation i between users 2i and 2i+1,
// so that no two share a member: every send of a batch touches rows of its own.
func createDirects(ctx context.Context, svc *chat.Service, n int) ([]conv, error) {
	convs := make([]conv, n)
	err := concurrently(n, func(i int) error {
		a, p := userID(2*i), userID(2*i+1)
		b, err := svc.CreateConversation(ctx, chat.Identity{UserID: a, DeviceID: "bench"},
			protocol.CreateConversationRequest{Type: protocol.TypeDirect, PeerID: p})
		convs[i] = conv{id: b.ConvID, members: []string{a, p}}
		return err
	})
	return convs, err
}

func userID(i int) string { return "u" + strconv.Itoa(i) }

// concurrently calls fn(0) to fn(n-1), Senders at a time, and returns the first error.
func concurrently(n int, fn func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, Senders)
	for range Senders {
		go func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("item %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range Senders {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
