// Package cliflag is the flag handling shared by Parley's commands (parley and parley-bench):
// every flag can also be set by an environment variable, and the usage text says which, so
// that a container or a systemd unit configures a command without a shell wrapper.
package cliflag

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// EnvName is the environment variable that sets a flag: PARLEY_ plus the flag name in upper
// case with dashes as underscores (--admin-secret is PARLEY_ADMIN_SECRET).
func EnvName(flagName string) string {
	return "PARLEY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then fills every flag not given on the command line from its
// environment variable: flags win over the environment, which wins over defaults.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" && !given[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, e)
			}
		}
	})
	return err
}

// NewFlagSet returns a flag set for the command line "usage" (such as "parley serve") whose
// usage text lists the environment variable of every flag.
func NewFlagSet(usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(usage, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\nflags (each also settable by its environment variable):\n", usage)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(stderr, "  --%s (%s)\n    \t%s (default %q)\n", f.Name, EnvName(f.Name), f.Usage, f.DefValue)
		})
	}
	return fs
}
