package mocksysfs

import (
	"strings"
	"testing"
)

// FuzzParseFault checks that the --fault parser never panics and that
// whatever it accepts is a fault Spec validation can judge.
func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"link-down:cxi3", "no-retry-handler:cxi0", "missing:cxi1:device/properties/nid",
		"garbage:cxi2:netdev/operstate=sideways", "garbage:cxi2:a=b=c", "melt:cxi0", "link-down:cxi", "::", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := ParseFault(s)
		if err != nil {
			return
		}
		if fault.Kind < FaultLinkDown || fault.Kind > FaultGarbage || fault.NIC < 0 {
			t.Fatalf("ParseFault(%q) = %+v", s, fault)
		}
		if !strings.HasPrefix(s, fault.Kind.String()+":cxi") {
			t.Fatalf("ParseFault(%q) = %+v: kind does not match the text", s, fault)
		}
		_ = Spec{NICs: 4, Faults: []Fault{fault}}.Validate()
	})
}
