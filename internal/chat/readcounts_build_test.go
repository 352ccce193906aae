package chat

import (
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// TestBuildKeepsRaisesThatOvertookIt: a position change committed while the counts of a
// conversation are being built is applied to the build once it is installed, whether or not
// its snapshot had it, so a busy large group gets counted; a member change still throws the
// build away.
func TestBuildKeepsRaisesThatOvertookIt(t *testing.T) {
	rc := newReadCounts()
	members := []store.Member{{UserID: "alice"}, {UserID: "bob"}, {UserID: "carol", ReadSeq: 2, DeliveredSeq: 2}}

	install := rc.startBuild("g1")
	rc.advance("g1", "bob", 3, 3)   // after the snapshot below was read
	rc.advance("g1", "carol", 1, 1) // older than the snapshot's: changes nothing
	install(members)
	n, read, delivered, ok := rc.count("g1", "alice", 3)
	if !ok || n != 2 || read != 1 || delivered != 1 {
		t.Fatalf("count of seq 3: ok %v, members %d, read %d, delivered %d; want 2, 1, 1", ok, n, read, delivered)
	}
	if _, read, _, _ := rc.count("g1", "alice", 2); read != 2 {
		t.Fatalf("read of seq 2 = %d, want 2 (carol kept 2)", read)
	}

	install = rc.startBuild("g2")
	rc.changeMembers("g2", []store.Member{{UserID: "dave"}}, nil)
	install(members)
	if _, _, _, ok := rc.count("g2", "alice", 1); ok {
		t.Fatal("a build overtaken by a member change was installed")
	}
}
