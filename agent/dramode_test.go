package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
)

// TestBuildDRAFailsClosedAndMakesNoSecondCDIWriter: the DRA front end is
// built over the agent's own CDI writer, the one the agent closes, and
// refuses to start when it has none (cdi.enabled false) rather than make
// a second writer nobody closes and write specs the configuration says
// are off (issue 32, fail-open defaults). The unchecked type assertion on
// the NICs' drivers that could panic the agent is gone: every driver is an
// engine.Driver.
func TestBuildDRAFailsClosedAndMakesNoSecondCDIWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spoil   func(a *parts)
		wantErr string // "": built
	}{
		{"built over the agent's writer", func(*parts) {}, ""},
		{"CDI off", func(a *parts) { a.cdi = nil }, "--api=dra needs CDI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSimRig(t, t.TempDir())
			a := &parts{
				opts: Options{NodeName: "n1", DRADriverName: "cxi.slingshot.hpe.com", NRISocket: "/nonexistent/nri.sock",
					SysfsRoot: t.TempDir(), ProcRoot: t.TempDir(), CXIDriver: "sim"},
				logger: testLogger(t), reg: prometheus.NewPedanticRegistry(), events: event.Nop{},
				// Never contacted: nothing is run.
				kube: fake.NewClientset(), kcfg: &rest.Config{Host: "https://127.0.0.1:1"},
				nics: r.nics, eng: r.eng, cdi: r.cdi, m: r.m,
				served: []sysfs.NIC{{Name: "cxi0", PCIAddress: "0000:21:00.0"}, {Name: "cxi1", PCIAddress: "0000:22:00.0"}},
			}
			a.cfg.NICResource.Name = "hpe.com/cxi"
			a.pol.Store(new(policyFrom(a.cfg)))
			tc.spoil(a)
			w := a.cdi
			err := a.buildDRA(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("buildDRA: error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("buildDRA: %v", err)
			}
			if _, ok := a.fe.(*draFront); !ok {
				t.Fatalf("front end %T, want the DRA one", a.fe)
			}
			if got, err := a.draCDI(); err != nil || got != w {
				t.Fatalf("the claims' CDI writer %p (%v), want the agent's %p", got, err, w)
			}
		})
	}
}
