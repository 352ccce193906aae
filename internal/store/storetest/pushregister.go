package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// raceWait bounds the waits of the registration races: generous, as the machine may be
// busy, but a hang fails rather than stalls the suite.
const raceWait = 30 * time.Second

// register runs store.RegisterPushTarget in an Update of its own and returns the target
// as stored and its error.
func register(s store.Store, p store.PushTarget, gen int64, maxTargets int) (stored store.PushTarget, err error) {
	err = s.Update(context.Background(), func(tx store.Tx) error {
		var err error
		stored, err = store.RegisterPushTarget(context.Background(), tx, p, gen, maxTargets)
		return err
	})
	return stored, err
}

// revoke is what a revocation writes, in one Update: the user's generation raised by one
// and every push target of the user removed. It returns the new generation.
func revoke(t *testing.T, s store.Store, userID string) (gen int64) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		u, err := tx.User(ctx, userID)
		if err != nil {
			return err
		}
		gen = u.TokenGen + 1
		if err := tx.SetTokenGen(ctx, userID, gen); err != nil {
			return err
		}
		ts, err := tx.PushTargets(ctx, userID)
		for _, p := range ts {
			if err := tx.DeletePushTarget(ctx, userID, p.DeviceID); err != nil {
				return err
			}
		}
		return err
	})
	return gen
}

// testPushRegisterChecks: a registration starts at the user's last cursor, a replacement
// keeps the cursor and does not count against the cap, one past the cap is
// ErrTooManyTargets, one with a generation that is not the user's is ErrStaleGeneration,
// and one of an unknown user ErrNotFound; none of the refused ones writes anything.
func testPushRegisterChecks(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for ts := range int64(3) {
			if _, err := tx.AppendEvent(ctx, readEvent("alice", ts+1)); err != nil {
				return err
			}
		}
		return nil
	})
	p := newTarget("alice", "phone", 0)
	got, err := register(s, p, 1, 2)
	p.Cursor = 3
	if err != nil || got != p {
		t.Fatalf("first registration = %+v, %v; want %+v (at the last cursor)", got, err, p)
	}
	wantTarget(t, s, "after the first registration", p)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AdvancePushCursor(ctx, "alice", "phone", 1) })
	if _, err := register(s, newTarget("alice", "tablet", 0), 1, 2); err != nil {
		t.Fatalf("second registration: %v", err)
	}
	_, err = register(s, newTarget("alice", "laptop", 0), 1, 2)
	wantErr(t, "a third device with a cap of 2", err, store.ErrTooManyTargets)
	r := newTarget("alice", "phone", 0)
	r.Token = "a new token"
	got, err = register(s, r, 1, 2)
	r.Cursor = 3
	if err != nil || got != r {
		t.Errorf("replacement at the cap = %+v, %v; want %+v (its cursor kept)", got, err, r)
	}
	_, err = register(s, newTarget("alice", "laptop", 0), 2, 10)
	wantErr(t, "a registration of generation 2 for a user at 1", err, store.ErrStaleGeneration)
	_, err = register(s, newTarget("alice", "phone", 0), 0, 10)
	wantErr(t, "a replacement of generation 0 for a user at 1", err, store.ErrStaleGeneration)
	_, err = register(s, newTarget("nobody", "phone", 0), 1, 10)
	wantErr(t, "a registration of an unknown user", err, store.ErrNotFound)
	if ps := readTargets(t, s, "alice"); len(ps) != 2 || ps[0] != r {
		t.Errorf("targets = %+v, want the replaced phone and the tablet only", ps)
	}
	if ps := readTargets(t, s, "nobody"); len(ps) != 0 {
		t.Errorf("targets of the unknown user = %+v", ps)
	}
}

// testPushRegisterCapConcurrent: devices registering at once cannot together pass the
// cap: exactly maxTargets of them are stored, and the others are ErrTooManyTargets.
func testPushRegisterCapConcurrent(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	const devices, maxTargets = 16, 5
	var ok, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range devices {
		wg.Go(func() {
			_, err := register(s, newTarget("alice", fmt.Sprintf("d%02d", i), 0), 1, maxTargets)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrTooManyTargets):
				refused.Add(1)
			default:
				t.Errorf("registration of d%02d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != maxTargets || refused.Load() != devices-maxTargets {
		t.Errorf("%d registered and %d refused, want %d and %d", ok.Load(), refused.Load(), maxTargets, devices-maxTargets)
	}
	if ps := readTargets(t, s, "alice"); len(ps) != maxTargets {
		t.Errorf("%d targets stored, want %d", len(ps), maxTargets)
	}
}

// testPushRegisterRacesRevoke: devices register in a loop, each with the generation its
// token had, while the user is revoked; once the revocation has returned no target is
// stored (those that committed before it were removed, those after it refused), and every
// registrar ends on ErrStaleGeneration. It is run for several rounds, so that the
// revocation lands between a registration's check and its write at least once on a store
// that would let it.
func testPushRegisterRacesRevoke(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	gen := int64(1)
	for round := range 8 {
		const workers = 4
		started := make(chan struct{}, workers)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				p := newTarget("alice", fmt.Sprintf("r%d-d%d", round, i), 0)
				for k := 0; ; k++ {
					p.Token = fmt.Sprintf("token %d", k)
					_, err := register(s, p, gen, 1000)
					switch {
					case err == nil && k == 0:
						started <- struct{}{}
					case err == nil:
					case errors.Is(err, store.ErrStaleGeneration):
						return
					default:
						t.Errorf("registration: %v", err)
						return
					}
				}
			})
		}
		waitN(t, started, workers, "a first registration of each device")
		next := revoke(t, s, "alice")
		if ps := readTargets(t, s, "alice"); len(ps) != 0 {
			t.Errorf("round %d: %d targets stored once the revocation returned: %+v", round, len(ps), ps)
		}
		waitGroup(t, &wg, "the registrars to be refused")
		if ps := readTargets(t, s, "alice"); len(ps) != 0 {
			t.Errorf("round %d: %d targets stored after the registrars stopped: %+v", round, len(ps), ps)
		}
		gen = next
	}
}

// waitN receives n values from c, failing the test after raceWait.
func waitN(t *testing.T, c <-chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(raceWait)
	for range n {
		select {
		case <-c:
		case <-timeout:
			t.Fatalf("no %s within %v", what, raceWait)
		}
	}
}

// waitGroup waits for wg, failing the test after raceWait.
func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(raceWait):
		t.Fatalf("waited %v for %s", raceWait, what)
	}
}
