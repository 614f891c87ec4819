package hsnlink

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// BenchmarkAttachDetach measures one pod's PreStart and exit: Attach of a
// macvlan child with its address, then Detach, in one namespace.
func BenchmarkAttachDetach(b *testing.B) {
	e := newEnv(b)
	pod := testenv.NewNetNS(b)
	s := spec("10.150.3.7/16")
	for b.Loop() {
		if err := e.attach(pod, s); err != nil {
			b.Fatal(err)
		}
		if err := Detach(pod, s.Name); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttachExisting measures the idempotent path: the link is there.
func BenchmarkAttachExisting(b *testing.B) {
	e := newEnv(b)
	pod := testenv.NewNetNS(b)
	s := spec("10.150.3.7/16")
	if err := e.attach(pod, s); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := e.attach(pod, s); err != nil {
			b.Fatal(err)
		}
	}
}
