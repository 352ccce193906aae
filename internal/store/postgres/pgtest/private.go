package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// Instance is a PostgreSQL server of the test's own, for tests that stop and restart the
// database under load, which they must not do to the machine's shared server.
type Instance struct {
	t    testing.TB
	bin  string // directory of initdb and pg_ctl
	dir  string // holds data/, the socket and the log
	port int
	// URL connects to its "postgres" database.
	URL string
	// asPostgres runs the tools as the postgres user: they refuse to run as root.
	asPostgres bool
}

// Private initializes and starts a new PostgreSQL server in a temporary directory, on a
// free loopback port, and removes it when t ends. It skips t when the server binaries are
// not installed.
func Private(t testing.TB) *Instance {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Skip("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql: this test runs a server of its own")
	}
	in := &Instance{t: t, bin: filepath.Dir(bins[len(bins)-1]), asPostgres: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "parley-pg-")
	if err != nil {
		t.Fatal(err)
	}
	in.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if in.asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	in.run("initdb", "-D", in.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
	in.Start()
	t.Cleanup(func() { _ = in.pgctl("stop", "-m", "immediate") })
	in.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", in.port)
	return in
}

func (in *Instance) data() string { return filepath.Join(in.dir, "data") }

// Start starts the server and waits until it accepts connections.
func (in *Instance) Start() {
	in.t.Helper()
	if err := in.pgctl("start", "-w", "-t", "30", "-l", filepath.Join(in.dir, "log"),
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", in.port, in.dir)); err != nil {
		log, _ := os.ReadFile(filepath.Join(in.dir, "log"))
		in.t.Fatalf("pgtest: start PostgreSQL: %v\n%s", err, log)
	}
}

// Stop stops the server the way an operator's restart does ("fast": open transactions are
// rolled back, connections cut) and waits until it is down.
func (in *Instance) Stop() {
	in.t.Helper()
	if err := in.pgctl("stop", "-w", "-m", "fast"); err != nil {
		in.t.Fatalf("pgtest: stop PostgreSQL: %v", err)
	}
}

func (in *Instance) pgctl(args ...string) error {
	return in.command("pg_ctl", append([]string{"-D", in.data()}, args...)...).Run()
}

func (in *Instance) run(tool string, args ...string) {
	in.t.Helper()
	if out, err := in.command(tool, args...).CombinedOutput(); err != nil {
		in.t.Fatalf("pgtest: %s: %v\n%s", tool, err, out)
	}
}

func (in *Instance) command(tool string, args ...string) *exec.Cmd {
	path := filepath.Join(in.bin, tool)
	if in.asPostgres {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}
