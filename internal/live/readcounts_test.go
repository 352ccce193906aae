package live

import (
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// TestBuildKeepsRaisesThatOvertookIt: a position change committed while the counts of a
// conversation are being built is applied to the build once it is installed, whether or not
// its snapshot had it, so a busy large group gets counted; a member change still throws the
// build away.
func TestBuildKeepsRaisesThatOvertookIt(t *testing.T) {
	rc := NewReadCounts(nil, 0)
	members := []store.Member{{UserID: "alice"}, {UserID: "bob"}, {UserID: "carol", ReadSeq: 2, DeliveredSeq: 2}}

	install := rc.StartBuild("g1")
	rc.Advance("g1", "bob", 3, 3)   // after the snapshot below was read
	rc.Advance("g1", "carol", 1, 1) // older than the snapshot's: changes nothing
	install(members)
	n, read, delivered, ok := rc.Count("g1", "alice", 3)
	if !ok || n != 2 || read != 1 || delivered != 1 {
		t.Fatalf("count of seq 3: ok %v, members %d, read %d, delivered %d; want 2, 1, 1", ok, n, read, delivered)
	}
	if _, read, _, _ := rc.Count("g1", "alice", 2); read != 2 {
		t.Fatalf("read of seq 2 = %d, want 2 (carol kept 2)", read)
	}

	install = rc.StartBuild("g2")
	rc.ChangeMembers("g2", []store.Member{{UserID: "dave"}}, nil)
	install(members)
	if _, _, _, ok := rc.Count("g2", "alice", 1); ok {
		t.Fatal("a build overtaken by a member change was installed")
	}
}

// TestBusRaisesRebuildCountsAtMostEveryFewSeconds: a raise of a user the counts do not
// hold, or a member change, told by the bus makes a group's counts stale only once
// rebuildEvery has passed since they were built, so that forged positions cannot make a
// node read a large group's members again and again; the same raise committed here drops
// them at once, as before.
func TestBusRaisesRebuildCountsAtMostEveryFewSeconds(t *testing.T) {
	rc := NewReadCounts(nil, 0)
	members := []store.Member{{UserID: "alice"}, {UserID: "bob", ReadSeq: 3, DeliveredSeq: 3}}
	rc.StartBuild("g_1")(members)
	held := func() bool { _, _, _, ok := rc.Count("g_1", "alice", 1); return ok }

	rc.AdvanceElsewhere("g_1", "mallory", 9, 9)
	rc.ForgetSoon("g_1")
	if !held() {
		t.Fatal("counts dropped by the bus at once")
	}
	if _, read, _, _ := rc.Count("g_1", "alice", 3); read != 1 {
		t.Fatalf("read of seq 3 = %d, want 1: a raise of a user not counted changed the counts", read)
	}
	sh := rc.shard("g_1")
	sh.mu.Lock()
	sh.convs["g_1"].built = time.Now().Add(-rebuildEvery) // as if built rebuildEvery ago
	sh.mu.Unlock()
	rc.ForgetSoon("g_1")
	if held() {
		t.Fatal("counts kept after a member change elsewhere, rebuildEvery after their build")
	}

	rc.StartBuild("g_1")(members)
	rc.Advance("g_1", "mallory", 9, 9) // committed here: a join not applied yet
	if held() {
		t.Fatal("a raise committed here of a user not counted kept the counts")
	}
}
