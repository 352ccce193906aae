package storetest

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// pushTests are the tests of store.PushReader and store.PushWriter that run on a fresh
// store; Run runs them with its own.
func pushTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	return []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Push/PutAndReplace", testPushPutAndReplace},
		{"Push/TargetsOrdered", testPushTargetsOrdered},
		{"Push/TargetsAfterPages", testPushTargetsAfterPages},
		{"Push/Delete", testPushDelete},
		{"Push/CursorOnlyAdvances", testPushCursorOnlyAdvances},
		{"Push/CursorConcurrent", testPushCursorConcurrent},
		{"Push/Mutes", testPushMutes},
		{"Push/ErrorLeavesNothing", testPushErrorLeavesNothing},
		{"Push/RegisterChecks", testPushRegisterChecks},
		{"Push/RegisterCapConcurrent", testPushRegisterCapConcurrent},
		{"Push/RegisterRacesRevoke", testPushRegisterRacesRevoke},
	}
}

// newTarget returns a push target fixture.
func newTarget(user, device string, cursor int64) store.PushTarget {
	return store.PushTarget{
		UserID: user, DeviceID: device, Provider: "apns", Token: "token of " + user + "/" + device,
		Topic: "chat.parley.app", Locale: "en-GB", RegisteredAt: 1_700_000_000_000, Cursor: cursor,
	}
}

// putTargets stores each target in one Update.
func putTargets(t *testing.T, s store.Store, ps ...store.PushTarget) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, p := range ps {
			if err := tx.PutPushTarget(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// readTarget reads one target in a View; err is PushTarget's.
func readTarget(t *testing.T, s store.Store, user, device string) (p store.PushTarget, err error) {
	t.Helper()
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		p, err = tx.PushTarget(ctx, user, device)
		return nil
	})
	return p, err
}

// wantTarget fails the test unless the stored target (user, device) is want.
func wantTarget(t *testing.T, s store.Store, what string, want store.PushTarget) {
	t.Helper()
	got, err := readTarget(t, s, want.UserID, want.DeviceID)
	if err != nil || got != want {
		t.Errorf("%s: PushTarget = %+v, %v; want %+v", what, got, err, want)
	}
}

// readTargets reads the user's targets in a View.
func readTargets(t *testing.T, s store.Store, user string) []store.PushTarget {
	t.Helper()
	return readRows(t, s, func(ctx context.Context, tx store.ReadTx) ([]store.PushTarget, error) {
		return tx.PushTargets(ctx, user)
	})
}

// readMutes reads the user's mutes in a View.
func readMutes(t *testing.T, s store.Store, user string) []store.Mute {
	t.Helper()
	return readRows(t, s, func(ctx context.Context, tx store.ReadTx) ([]store.Mute, error) {
		return tx.Mutes(ctx, user)
	})
}

// readRows returns what read reads in a View.
func readRows[T any](t *testing.T, s store.Store, read func(ctx context.Context, tx store.ReadTx) ([]T, error)) (rows []T) {
	t.Helper()
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
		rows, err = read(ctx, tx)
		return err
	})
	return rows
}

// sameRows reports whether got and want hold the same rows, nil and empty alike.
func sameRows[T any](got, want []T) bool {
	return len(got) == 0 && len(want) == 0 || reflect.DeepEqual(got, want)
}

// testPushPutAndReplace: a target reads back as put, an Update sees its own put, a
// missing one is ErrNotFound, and a second put replaces every field with what it was
// given, the cursor included, even a lower one.
func testPushPutAndReplace(t *testing.T, s store.Store) {
	p := newTarget("alice", "phone", 7)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.PutPushTarget(ctx, p); err != nil {
			return err
		}
		got, err := tx.PushTarget(ctx, "alice", "phone")
		if err != nil || got != p {
			t.Errorf("PushTarget in the Update that put it = %+v, %v; want %+v", got, err, p)
		}
		return nil
	})
	wantTarget(t, s, "after put", p)
	_, err := readTarget(t, s, "alice", "tablet")
	wantErr(t, "PushTarget of another device", err, store.ErrNotFound)
	_, err = readTarget(t, s, "bob", "phone")
	wantErr(t, "PushTarget of another user", err, store.ErrNotFound)

	r := store.PushTarget{UserID: "alice", DeviceID: "phone", Provider: "webpush",
		Token:  `{"endpoint":"https://push.example/x","keys":{"p256dh":"k","auth":"a"}}`,
		Locale: "fr", RegisteredAt: 1_700_000_500_000, Cursor: 3}
	putTargets(t, s, r)
	wantTarget(t, s, "after replace (topic emptied, cursor lowered as given)", r)
	if ps := readTargets(t, s, "alice"); len(ps) != 1 {
		t.Errorf("PushTargets after replace = %+v, want the one target", ps)
	}
}

// testPushTargetsOrdered: PushTargets lists the user's targets and no one else's, ordered
// by device id byte by byte (upper case before lower), and none for a user without any.
func testPushTargetsOrdered(t *testing.T, s store.Store) {
	putTargets(t, s, newTarget("bob", "web-2", 1), newTarget("bob", "Android", 2),
		newTarget("bob", "web-10", 3), newTarget("bo", "x", 4), newTarget("bobby", "a", 5),
		newTarget("bob", "ipad", 6))
	want := []store.PushTarget{newTarget("bob", "Android", 2), newTarget("bob", "ipad", 6),
		newTarget("bob", "web-10", 3), newTarget("bob", "web-2", 1)}
	if got := readTargets(t, s, "bob"); !reflect.DeepEqual(got, want) {
		t.Errorf("PushTargets(bob) =\n%+v\nwant\n%+v", got, want)
	}
	if got := readTargets(t, s, "carol"); len(got) != 0 {
		t.Errorf("PushTargets of a user without targets = %+v, want none", got)
	}
}

// testPushTargetsAfterPages: paging with PushTargetsAfter from ("", "") reads every target
// of every user once, ordered by (user, device), whatever the page size; a page starts
// strictly after the pair given, which need not be stored.
func testPushTargetsAfterPages(t *testing.T, s store.Store) {
	var want []store.PushTarget
	for _, u := range []string{"Zoe", "alice", "bob", "bobby"} {
		for _, d := range []string{"a", "b", "c"} {
			want = append(want, newTarget(u, d, int64(len(want))))
		}
	}
	shuffled := append([]store.PushTarget(nil), want...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	putTargets(t, s, shuffled...)

	for _, limit := range []int{1, 2, 5, len(want), len(want) + 3} {
		var got []store.PushTarget
		user, device := "", ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			var page []store.PushTarget
			view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
				page, err = tx.PushTargetsAfter(ctx, user, device, limit)
				return err
			})
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			last := page[len(page)-1]
			user, device = last.UserID, last.DeviceID
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("limit %d: pages =\n%+v\nwant\n%+v", limit, got, want)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		page, err := tx.PushTargetsAfter(ctx, "bob", "bb", 2) // not stored: starts at bob/c
		if err != nil || !reflect.DeepEqual(page, want[8:10]) {
			t.Errorf("PushTargetsAfter(bob, bb, 2) = %+v, %v; want %+v", page, err, want[8:10])
		}
		page, err = tx.PushTargetsAfter(ctx, "alice", "", 1) // every device of alice is after ""
		if err != nil || !reflect.DeepEqual(page, want[3:4]) {
			t.Errorf("PushTargetsAfter(alice, \"\", 1) = %+v, %v; want %+v", page, err, want[3:4])
		}
		page, err = tx.PushTargetsAfter(ctx, "", "", 0)
		if err != nil || len(page) != 0 {
			t.Errorf("PushTargetsAfter with limit 0 = %+v, %v; want nothing", page, err)
		}
		return nil
	})
}

// testPushDelete: DeletePushTarget removes one target, leaves the others, and is
// ErrNotFound for a target that is not there (no more), without aborting the Update.
func testPushDelete(t *testing.T, s store.Store) {
	putTargets(t, s, newTarget("alice", "phone", 1), newTarget("alice", "laptop", 2))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeletePushTarget(ctx, "alice", "phone"); err != nil {
			return err
		}
		_, err := tx.PushTarget(ctx, "alice", "phone")
		wantErr(t, "PushTarget in the Update that deleted it", err, store.ErrNotFound)
		wantErr(t, "DeletePushTarget again", tx.DeletePushTarget(ctx, "alice", "phone"), store.ErrNotFound)
		wantErr(t, "DeletePushTarget of another user's device", tx.DeletePushTarget(ctx, "bob", "laptop"), store.ErrNotFound)
		return tx.PutMute(ctx, store.Mute{UserID: "alice", ConvID: "c1", Until: 5}) // the Update goes on
	})
	_, err := readTarget(t, s, "alice", "phone")
	wantErr(t, "PushTarget after DeletePushTarget", err, store.ErrNotFound)
	wantTarget(t, s, "the other device", newTarget("alice", "laptop", 2))
	if ms := readMutes(t, s, "alice"); len(ms) != 1 {
		t.Errorf("Mutes = %+v: the Update did not go on after ErrNotFound", ms)
	}
}

// testPushCursorOnlyAdvances: AdvancePushCursor keeps the larger of the stored and the
// asked cursor, touches no other field, and is ErrNotFound for a missing target.
func testPushCursorOnlyAdvances(t *testing.T, s store.Store) {
	p := newTarget("alice", "phone", 10)
	putTargets(t, s, p)
	for i, st := range []struct{ ask, want int64 }{{12, 12}, {11, 12}, {12, 12}, {0, 12}, {-5, 12}, {40, 40}} {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			if err := tx.AdvancePushCursor(ctx, "alice", "phone", st.ask); err != nil {
				return err
			}
			got, err := tx.PushTarget(ctx, "alice", "phone")
			if err != nil || got.Cursor != st.want {
				t.Errorf("step %d: cursor after AdvancePushCursor(%d) = %d, %v; want %d", i, st.ask, got.Cursor, err, st.want)
			}
			return nil
		})
	}
	p.Cursor = 40
	wantTarget(t, s, "after the steps", p)
	err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.AdvancePushCursor(t.Context(), "alice", "tablet", 5)
	})
	wantErr(t, "AdvancePushCursor of a missing target", err, store.ErrNotFound)
	if _, err := readTarget(t, s, "alice", "tablet"); err == nil {
		t.Error("AdvancePushCursor of a missing target created it")
	}
}

// testPushCursorConcurrent: cursors advanced side by side, each in its own Update, end at
// the largest asked.
func testPushCursorConcurrent(t *testing.T, s store.Store) {
	putTargets(t, s, newTarget("alice", "phone", 0))
	const workers, each = 8, 25
	var mu sync.Mutex
	var highest int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				c := rand.Int64N(1000)
				err := s.Update(context.Background(), func(tx store.Tx) error {
					return tx.AdvancePushCursor(context.Background(), "alice", "phone", c)
				})
				if err != nil {
					t.Errorf("AdvancePushCursor: %v", err)
					return
				}
				mu.Lock()
				highest = max(highest, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got, err := readTarget(t, s, "alice", "phone"); err != nil || got.Cursor != highest {
		t.Errorf("cursor = %d, %v; want %d, the largest asked", got.Cursor, err, highest)
	}
}

// testPushMutes: mutes read back ordered by conversation, the user's only, a second put
// replaces one, "for ever" survives, and DeleteMute removes one or is ErrNotFound.
func testPushMutes(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, m := range []store.Mute{
			{UserID: "alice", ConvID: "c2", Until: 100},
			{UserID: "alice", ConvID: "C9", Until: math.MaxInt64},
			{UserID: "alice", ConvID: "c1", Until: 50},
			{UserID: "alicia", ConvID: "c1", Until: 60},
			{UserID: "alice", ConvID: "c2", Until: 200}, // replaces
		} {
			if err := tx.PutMute(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	want := []store.Mute{
		{UserID: "alice", ConvID: "C9", Until: math.MaxInt64},
		{UserID: "alice", ConvID: "c1", Until: 50},
		{UserID: "alice", ConvID: "c2", Until: 200},
	}
	if got := readMutes(t, s, "alice"); !reflect.DeepEqual(got, want) {
		t.Errorf("Mutes(alice) =\n%+v\nwant\n%+v", got, want)
	}
	if got := readMutes(t, s, "bob"); len(got) != 0 {
		t.Errorf("Mutes of a user without any = %+v, want none", got)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeleteMute(ctx, "alice", "c1"); err != nil {
			return err
		}
		wantErr(t, "DeleteMute again", tx.DeleteMute(ctx, "alice", "c1"), store.ErrNotFound)
		wantErr(t, "DeleteMute of another user's", tx.DeleteMute(ctx, "bob", "c2"), store.ErrNotFound)
		return nil
	})
	if got := readMutes(t, s, "alice"); !sameRows(got, []store.Mute{want[0], want[2]}) {
		t.Errorf("Mutes(alice) after DeleteMute = %+v, want %+v", got, []store.Mute{want[0], want[2]})
	}
	if got := readMutes(t, s, "alicia"); len(got) != 1 {
		t.Errorf("Mutes(alicia) after alice's DeleteMute = %+v, want hers kept", got)
	}
}

// pushState is every push row of the users ErrorLeavesNothing writes.
type pushState struct {
	Targets [][]store.PushTarget
	Mutes   [][]store.Mute
}

func readPushState(t *testing.T, s store.Store, users ...string) (st pushState) {
	t.Helper()
	for _, u := range users {
		st.Targets = append(st.Targets, readTargets(t, s, u))
		st.Mutes = append(st.Mutes, readMutes(t, s, u))
	}
	return st
}

// testPushErrorLeavesNothing: an Update whose fn fails after every kind of push write
// (put, replace, advance, delete, of targets and mutes) leaves the rows as they were.
func testPushErrorLeavesNothing(t *testing.T, s store.Store) {
	putTargets(t, s, newTarget("alice", "phone", 5), newTarget("alice", "laptop", 6))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.PutMute(ctx, store.Mute{UserID: "alice", ConvID: "c1", Until: 10})
	})
	before := readPushState(t, s, "alice", "bob")
	err := s.Update(t.Context(), func(tx store.Tx) error {
		ctx := t.Context()
		steps := []error{
			tx.PutPushTarget(ctx, newTarget("bob", "phone", 1)),
			tx.PutPushTarget(ctx, newTarget("alice", "laptop", 1)),
			tx.AdvancePushCursor(ctx, "alice", "phone", 99),
			tx.DeletePushTarget(ctx, "alice", "laptop"),
			tx.PutMute(ctx, store.Mute{UserID: "alice", ConvID: "c1", Until: 20}),
			tx.PutMute(ctx, store.Mute{UserID: "bob", ConvID: "c1", Until: 20}),
			tx.DeleteMute(ctx, "alice", "c1"),
		}
		for i, err := range steps {
			if err != nil {
				t.Errorf("step %d: %v", i, err)
			}
		}
		return errTest
	})
	wantErr(t, "Update whose fn failed", err, errTest)
	if after := readPushState(t, s, "alice", "bob"); !reflect.DeepEqual(after, before) {
		t.Errorf("after a failed Update:\n%+v\nwant\n%+v", after, before)
	}
}

// testPushReopenKeeps: targets and mutes read back the same after the store is closed and
// opened again.
func testPushReopenKeeps(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	putTargets(t, s, newTarget("alice", "phone", 3), newTarget("bob", "web", 4))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.AdvancePushCursor(ctx, "alice", "phone", 9); err != nil {
			return err
		}
		return tx.PutMute(ctx, store.Mute{UserID: "alice", ConvID: "c1", Until: math.MaxInt64})
	})
	before := readPushState(t, s, "alice", "bob")
	if len(before.Targets[0]) != 1 || before.Targets[0][0].Cursor != 9 || len(before.Mutes[0]) != 1 {
		t.Fatalf("the rows written before Close are not all there: %+v", before)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	if after := readPushState(t, s, "alice", "bob"); !reflect.DeepEqual(after, before) {
		t.Errorf("after reopen:\n%+v\nwant:\n%+v", after, before)
	}
}
