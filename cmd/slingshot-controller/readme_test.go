package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestREADMEFlagTable keeps the documented table of controller flags
// (docs/configuration.md) in step with the flags: every flag it names
// exists, and where a row gives one default per flag, each is the flag's.
func TestREADMEFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Controller\n")
	if !ok {
		t.Fatal("docs/configuration.md: no Controller section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	flags := map[string]*flag.Flag{}
	flagSet(&Config{}, io.Discard).VisitAll(func(f *flag.Flag) { flags[f.Name] = f })
	code := regexp.MustCompile("`([^`]*)`")
	rows := 0
	for line := range strings.SplitSeq(section, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.Contains(cols[1], "`--") {
			continue
		}
		rows++
		var names, defs []string
		for _, m := range code.FindAllStringSubmatch(cols[1], -1) {
			names = append(names, strings.TrimPrefix(m[1], "--"))
		}
		for _, m := range code.FindAllStringSubmatch(cols[2], -1) {
			defs = append(defs, m[1])
		}
		for i, name := range names {
			f, ok := flags[name]
			if !ok {
				t.Errorf("README names --%s, which is no flag", name)
				continue
			}
			if len(defs) == len(names) && !sameDefault(defs[i], f.DefValue) {
				t.Errorf("README gives --%s the default %q; the flag's is %q", name, defs[i], f.DefValue)
			}
		}
	}
	if rows == 0 {
		t.Fatal("README: no flag rows in the Controller table")
	}
	for _, name := range []string{"api-qps", "api-burst"} {
		if !strings.Contains(section, "`--"+name+"`") {
			t.Errorf("README's Controller table lacks --%s", name)
		}
	}
}

// sameDefault compares a README default with a flag's DefValue; durations
// by their value ("1m" is "1m0s").
func sameDefault(readme, def string) bool {
	if readme == def {
		return true
	}
	a, errA := time.ParseDuration(readme)
	b, errB := time.ParseDuration(def)
	return errA == nil && errB == nil && a == b
}
