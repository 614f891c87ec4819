// Package flagenv lets every command-line flag also be set from the
// environment, as a DaemonSet's env section or the downward API does.
//
// The variable's name is the prefix plus the flag's name in upper case
// with dashes as underscores: --kubelet-dir with prefix SLINGSHOT_AGENT_
// reads SLINGSHOT_AGENT_KUBELET_DIR. A flag given on the command line wins.
// --version is the one flag read from the command line only.
package flagenv

import (
	"flag"
	"fmt"
	"strings"
)

// VersionFlag is the flag that asks a program for its version and no
// more. No variable sets it: one in a pod's environment would turn a
// running program into one that prints and exits.
const VersionFlag = "version"

// Name returns the environment variable that sets flag name.
func Name(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Apply sets every flag of fs that was not given on the command line from
// its environment variable, if that is set. lookup is os.LookupEnv in
// production. It must run after fs.Parse. An invalid value is an error that
// names the variable.
func Apply(fs *flag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || f.Name == VersionFlag {
			return
		}
		env := Name(prefix, f.Name)
		v, ok := lookup(env)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment %s=%q: %w", env, v, serr)
		}
	})
	return err
}

// Usage returns a flag.Usage function that prints a synopsis, every flag
// with its default and its environment variable.
func Usage(fs *flag.FlagSet, prefix, synopsis string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintln(w, synopsis)
		fmt.Fprintln(w, "\nFlags (each also read from the environment variable shown):")
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  --%s", f.Name)
			if name != "" {
				fmt.Fprintf(w, " %s", name)
			}
			fmt.Fprintf(w, "\n        %s", strings.ReplaceAll(usage, "\n", "\n        "))
			if f.DefValue != "" && f.DefValue != "false" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			}
			if f.Name == VersionFlag {
				fmt.Fprint(w, "\n        command line only\n")
				return
			}
			fmt.Fprintf(w, "\n        env %s\n", Name(prefix, f.Name))
		})
	}
}
