package bench

import (
	"errors"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100

// postgresCPU returns the CPU seconds (user + system) used so far by the processes of the
// postgres user on this machine: the postmaster, its live backends and helpers, and through
// the postmaster's cutime and cstime the backends that have exited since it started (it
// reaps them). Two readings bracket a load; their difference is PostgreSQL's share.
func postgresCPU() (float64, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, err
	}
	return processCPU("postgres user", func(pid string) bool {
		fi, err := os.Stat("/proc/" + pid)
		if err != nil {
			return false // ended meanwhile
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && uint64(st.Uid) == uid
	})
}

// natsCPU returns the CPU seconds used so far by the nats-server processes on this machine.
func natsCPU() (float64, error) {
	return processCPU("nats-server", func(pid string) bool {
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		return err == nil && strings.TrimSpace(string(comm)) == "nats-server"
	})
}

// processCPU sums the CPU times of the processes in /proc that match picks; what names them
// in the error when none is visible.
func processCPU(what string, picks func(pid string) bool) (float64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	found := false
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' || !picks(e.Name()) {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		t, ok := statTicks(string(raw))
		if ok {
			ticks += t
			found = true
		}
	}
	if !found {
		return 0, errors.New("no process of the " + what + " is visible in /proc")
	}
	return float64(ticks) / clockTicks, nil
}

// statTicks returns utime + stime + cutime + cstime from the text of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces, so fields are counted from
// the last ')': state is field 3, utime 14, stime 15, cutime 16, cstime 17.
func statTicks(stat string) (int64, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 15 {
		return 0, false
	}
	var sum int64
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, false
		}
		sum += n
	}
	return sum, true
}
