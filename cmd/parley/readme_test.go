package main

import (
	"flag"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/cliflag"
	"github.com/parleychat/parley/internal/server"
)

// readmeFlag is one flag as the README's configuration table documents it.
type readmeFlag struct {
	vars    []string // the variable column's PARLEY_ names, shared by the row's flags
	elided  bool     // the variable column names the first flag's and "…" for the others
	def     string   // the flag's default as the table writes it, "" when given in prose
	rowText string   // the row, for error messages
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	flagName   = regexp.MustCompile("^--([a-z0-9-]+)$")
	envVarName = regexp.MustCompile(`\bPARLEY_[A-Z0-9_]+\b`)
	aside      = regexp.MustCompile(`\([^)]*\)`) // "(256)" after a default
)

// readmeFlags parses the flag table of README.md's "Configuration" section: rows whose first
// cell names flags (`--addr`, or several: `--send-rate`, `--send-burst`), then the
// variable, the default and the meaning. A default cell made only of backticked values, one
// per flag, each maybe followed by an aside in parentheses ("`0` (256)"), gives each flag
// its default; any other (prose such as "generated") gives none.
func readmeFlags(t *testing.T, readme string) map[string]readmeFlag {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Configuration\n")
	if !ok {
		t.Fatal(`README.md has no "## Configuration" section`)
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	flags := map[string]readmeFlag{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("README flag row has %d cells, want 4 (flag, variable, default, meaning): %s", len(cells), line)
			continue
		}
		var names []string
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			f := flagName.FindStringSubmatch(m[1])
			if f == nil {
				t.Errorf("README flag cell %q holds %q, which is not a flag name", cells[0], m[1])
				continue
			}
			names = append(names, f[1])
		}
		defs := backticked.FindAllStringSubmatch(cells[2], -1)
		if strings.Trim(aside.ReplaceAllString(backticked.ReplaceAllString(cells[2], ""), ""), " ,") != "" {
			defs = nil // prose
		}
		for i, name := range names {
			if _, dup := flags[name]; dup {
				t.Errorf("README lists --%s twice", name)
			}
			rf := readmeFlag{vars: envVarName.FindAllString(cells[1], -1), elided: strings.Contains(cells[1], "…"), rowText: line}
			if len(defs) == len(names) {
				rf.def = defs[i][1]
			}
			flags[name] = rf
		}
	}
	if len(flags) == 0 {
		t.Fatal("README.md's Configuration section has no flag table")
	}
	return flags
}

// TestReadmeFlagTable holds the README's flag table to `parley serve`'s flag set: every flag
// of serve is in the table and every flag of the table is one of serve's, each row's
// variables are its flags' (cliflag.EnvName), and a default the table writes as a value is
// the flag's own.
func TestReadmeFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := readmeFlags(t, string(b))

	c := serveConfig{Node: server.DefaultConfig("./data")}
	fs, _ := serveFlags(&c, io.Discard)
	served := map[string]*flag.Flag{}
	envs := map[string]bool{} // the variables serve reads
	fs.VisitAll(func(f *flag.Flag) {
		served[f.Name] = f
		envs[cliflag.EnvName(f.Name)] = true
	})

	for _, name := range slices.Sorted(maps.Keys(served)) {
		f := served[name]
		rf, ok := documented[name]
		if !ok {
			t.Errorf("--%s (parley serve --help) is missing from the README's flag table", name)
			continue
		}
		// A row names each of its flags' variables, or the first and "…" for the rest.
		if env := cliflag.EnvName(name); !slices.Contains(rf.vars, env) && !(rf.elided && len(rf.vars) == 1) {
			t.Errorf("README row of --%s does not name its variable %s: %s", name, env, rf.rowText)
		}
		if rf.def != "" && !sameDefault(rf.def, f.DefValue) {
			t.Errorf("README gives --%s the default %q, parley serve has %q", name, rf.def, f.DefValue)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		rf := documented[name]
		if _, ok := served[name]; !ok {
			t.Errorf("README's flag table lists --%s, which parley serve does not have: %s", name, rf.rowText)
		}
		for _, v := range rf.vars {
			if !envs[v] {
				t.Errorf("README names the variable %s, which no flag of parley serve reads: %s", v, rf.rowText)
			}
		}
	}
}

// sameDefault reports whether the README's default doc is the flag default def: the same
// text, or the same duration written another way (75s for 1m15s).
func sameDefault(doc, def string) bool {
	if doc == def {
		return true
	}
	a, errA := time.ParseDuration(doc)
	b, errB := time.ParseDuration(def)
	return errA == nil && errB == nil && a == b
}
