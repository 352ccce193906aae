package storetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// crashChildEnv names the environment variable that makes testDurableAcrossKill's
// re-executed test binary the child: it opens the store in the directory the variable
// names, writes, prints each acknowledged Update, and kills itself while Updates are in
// flight.
const crashChildEnv = "PARLEY_STORETEST_CRASH_CHILD_DIR"

// crashAcks is how many acknowledged Updates the child waits for before killing itself.
const crashAcks = 300

// testDurableAcrossKill: every Update that returned before the process was killed is
// there when the store is opened again, and the log is gapless after recovery.
func testDurableAcrossKill(t *testing.T, h Harness) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, h, dir)
		return
	}
	switch {
	case testing.Short():
		t.Skip("re-executes the test binary")
	case h.LosesUpdatesOnKill:
		t.Skip("the backend, in this mode, may lose returned Updates when the process is killed")
	case runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1":
		t.Skip("needs a child process killed with SIGKILL")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run="+exactRun(t.Name()), "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, id)
		} else {
			t.Logf("child: %s", sc.Text())
		}
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Exited() {
		t.Fatalf("child ended with %v, want it killed", err)
	}
	if len(acked) < crashAcks {
		t.Fatalf("child acknowledged %d Updates, want at least %d", len(acked), crashAcks)
	}
	s := h.Open(t, Config{Dir: dir})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, id := range acked {
			if _, err := tx.User(ctx, id); err != nil {
				t.Errorf("acknowledged user %s after the kill: %v", id, err)
			}
		}
		return nil
	})
	b := cursorsOf(t, s, "log")
	if b.Last < int64(len(acked)) {
		t.Errorf("log's Last cursor %d after the kill, but %d Updates appending to it were acknowledged", b.Last, len(acked))
	}
	wantCursors(t, readLog(t, s, "log", 0), 1, b.Last)
}

// exactRun returns the -test.run pattern that selects exactly the test named name.
func exactRun(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// crashChild is the child of testDurableAcrossKill. Eight goroutines each create users
// and append to one log, an Update at a time, and print "acked <user>" (one write system
// call) once the Update returned; after crashAcks acknowledgements the process kills
// itself. It never returns.
func crashChild(t *testing.T, h Harness, dir string) {
	exit := func(format string, args ...any) {
		fmt.Printf(format+"\n", args...)
		os.Exit(1)
	}
	s := h.Open(t, Config{Dir: dir})
	ctx := context.Background()
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateUser(ctx, newUser("log")) }); err != nil {
		exit("create: %v", err)
	}
	var mu sync.Mutex
	var n atomic.Int64
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				id := "u" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				err := s.Update(ctx, func(tx store.Tx) error {
					if err := tx.CreateUser(ctx, newUser(id)); err != nil {
						return err
					}
					_, err := tx.AppendEvent(ctx, readEvent("log", int64(i)))
					return err
				})
				if err != nil {
					exit("update %s: %v", id, err)
				}
				mu.Lock()
				_, _ = os.Stdout.WriteString("acked " + id + "\n")
				mu.Unlock()
				if n.Add(1) == crashAcks {
					p, err := os.FindProcess(os.Getpid())
					if err == nil {
						err = p.Kill()
					}
					if err != nil {
						exit("kill itself: %v", err)
					}
				}
			}
		}()
	}
	select {}
}
