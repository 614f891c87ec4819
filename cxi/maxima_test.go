package cxi

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestIssue15Item12LowerNICMaxima (issue 15, item 12): cxi1 publishes
// lower resource maxima in sysfs (num_les 8192, num_tles 1024, num_ptes
// 1024) than the Cassini defaults. Each NIC is discovered from the mock
// tree and simulated from what discovery read (sim.MaxFromSysfs), as the
// agent opens it. The simulated driver, like the real one, refuses with
// EINVAL a service that asks for more than the NIC has, so the constant
// defaults fail on cxi1; a client given the NIC's maxima, as the agent
// gives them, creates the service with its default limits and with
// configured limits above the maxima, which it lowers, warning once.
func TestIssue15Item12LowerNICMaxima(t *testing.T) {
	dir := t.TempDir()
	truth, err := mocksysfs.Write(filepath.Join(dir, "node"), mocksysfs.Spec{NICs: 2, Seed: 12,
		Maxima: map[int]mocksysfs.ResourceMaxima{1: {LEs: 8192, TLEs: 1024, PTEs: 1024}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sysfs.Discover(os.DirFS(truth.SysRoot))
	if err != nil || d.Err() != nil || len(d.NICs) != 2 {
		t.Fatalf("discover: %v, %v", err, d.Err())
	}
	configured := Limits{PTEs: Limit{Max: 2048, Res: 8}, TXQs: Limit{Max: 1024, Res: 2}, LEs: Limit{Max: 16384},
		TLEs: Limit{Max: 2048}}
	vni := uint16(1024)
	spec := func(limits *Limits) ServiceSpec {
		vni++
		return ServiceSpec{VNIs: []uint16{vni}, Members: []Member{{MemberNetNS, podNetns + uint32(vni)}},
			TCs: TCBestEffort, Limits: limits}
	}
	for _, n := range d.NICs {
		m := n.Properties.Max
		s, err := sim.Open(filepath.Join(dir, "sim"), n.Name,
			sim.Options{VF: n.VF, Max: sim.MaxFromSysfs(m), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		dev := uapi.NewDevice(s)
		lower := m.LEs < 16384

		t.Run(n.Name+"/constant defaults", func(t *testing.T) {
			_, err := NewClient(dev).Create(t.Context(), spec(nil))
			if lower != errors.Is(err, unix.EINVAL) {
				t.Fatalf("Create with the Cassini defaults on %s (num_les %d): %v; want EINVAL only below them",
					n.Name, m.LEs, err)
			}
		})

		var warnings atomic.Int32
		c := NewClient(dev, WithDeviceMaxima(m), WithLogger(slog.New(warnCounter{&warnings})))
		want := func(l Limit, nicMax int) Limit {
			if int(l.Max) > nicMax {
				return Limit{Max: uint16(nicMax), Res: min(l.Res, uint16(nicMax))}
			}
			return l
		}
		for _, tc := range []struct {
			name   string
			limits *Limits
			les    Limit // what the driver stored
			ptes   Limit
		}{
			{"default limits", nil, Limit{Max: uint16(m.LEs)}, Limit{Max: uint16(m.PTEs)}},
			{"configured limits", &configured, want(configured.LEs, m.LEs), want(configured.PTEs, m.PTEs)},
			{"configured limits again", &configured, want(configured.LEs, m.LEs), want(configured.PTEs, m.PTEs)},
		} {
			t.Run(n.Name+"/"+tc.name, func(t *testing.T) {
				svc, err := c.Create(t.Context(), spec(tc.limits))
				if err != nil {
					t.Fatalf("Create on %s: %v", n.Name, err)
				}
				defer func() {
					if err := c.Destroy(context.WithoutCancel(t.Context()), svc.ID); err != nil {
						t.Error(err)
					}
				}()
				if svc.Limits == nil || svc.Limits.LEs != tc.les || svc.Limits.PTEs != tc.ptes {
					t.Errorf("stored limits %+v; want LEs %+v, PTEs %+v", svc.Limits, tc.les, tc.ptes)
				}
			})
		}
		if wantWarnings := map[bool]int32{true: 1, false: 0}[lower]; warnings.Load() != wantWarnings {
			t.Errorf("%s: %d warnings, want %d (once for the configured limits it lowered)",
				n.Name, warnings.Load(), wantWarnings)
		}
	}
}

// warnCounter is a slog handler that counts warnings.
type warnCounter struct{ n *atomic.Int32 }

func (w warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.n.Add(1)
	}
	return nil
}
func (w warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnCounter) WithGroup(string) slog.Handler      { return w }

// TestDeviceMaxima fits limits to a NIC's maxima: defaults become the
// maxima (TLEs stay 0), limits above them are lowered with their
// reservation, and a maximum that is unknown (0) or wider than 16 bits
// leaves the limit as it is.
func TestDeviceMaxima(t *testing.T) {
	nic := sysfs.ResourceMaxima{PTEs: 1000, TXQs: 0, TGQs: 70000, EQs: 100, CTs: 2047, ACs: 1022, TLEs: 1024, LEs: 8192}
	cassini := DefaultLimits()
	cassini.TXQs = Limit{Max: 1024, Res: 2}
	cases := []struct {
		name  string
		opts  []Option
		spec  *Limits
		want  Limits
		warns int32
	}{
		{name: "defaults are the NIC's maxima", opts: []Option{WithDeviceMaxima(nic)},
			want: Limits{PTEs: Limit{Max: 1000}, TXQs: Limit{Max: 1024}, TGQs: Limit{Max: 512}, EQs: Limit{Max: 100},
				CTs: Limit{Max: 2047}, LEs: Limit{Max: 8192}, ACs: Limit{Max: 1022}}},
		{name: "no maxima: the Cassini defaults", want: DefaultLimits()},
		{name: "configured defaults lowered", opts: []Option{WithDefaultLimits(Limits{LEs: Limit{Max: 16384, Res: 9000},
			EQs: Limit{Max: 50, Res: 5}, TGQs: Limit{Max: 600}}), WithDeviceMaxima(nic)},
			want: Limits{LEs: Limit{Max: 8192, Res: 8192}, EQs: Limit{Max: 50, Res: 5}, TGQs: Limit{Max: 600}}, warns: 1},
		{name: "a spec's limits lowered", opts: []Option{WithDeviceMaxima(nic)},
			spec:  &Limits{TLEs: Limit{Max: 2048, Res: 16}, TXQs: Limit{Max: 4000, Res: 1}, ACs: Limit{Max: 1022, Res: 2}},
			want:  Limits{TLEs: Limit{Max: 1024, Res: 16}, TXQs: Limit{Max: 4000, Res: 1}, ACs: Limit{Max: 1022, Res: 2}},
			warns: 1},
		// The agent fills the resources a configuration leaves out from
		// DefaultLimits: those are lowered quietly.
		{name: "the Cassini defaults in a spec lowered without a warning", opts: []Option{WithDeviceMaxima(nic)},
			spec: &cassini,
			want: Limits{PTEs: Limit{Max: 1000}, TXQs: Limit{Max: 1024, Res: 2}, TGQs: Limit{Max: 512}, EQs: Limit{Max: 100},
				CTs: Limit{Max: 2047}, LEs: Limit{Max: 8192}, ACs: Limit{Max: 1022}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingDevice{}
			var warnings atomic.Int32
			c := NewClient(rec, append(tc.opts, WithLogger(slog.New(warnCounter{&warnings})))...)
			spec := uidSpec(1024)
			spec.Limits = tc.spec
			if _, err := c.Create(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			if got := limitsFrom(rec.desc.Limits); got != tc.want || !rec.desc.ResourceLimits {
				t.Errorf("sent %+v, want %+v", got, tc.want)
			}
			if warnings.Load() != tc.warns {
				t.Errorf("%d warnings, want %d", warnings.Load(), tc.warns)
			}
		})
	}
}

// recordingDevice keeps the descriptor of the last SVC_ALLOC and answers
// as a driver that takes everything.
type recordingDevice struct {
	Device
	desc uapi.SvcDesc
}

func (r *recordingDevice) AllocService(d uapi.SvcDesc) (uint32, uapi.FailInfo, error) {
	r.desc = d
	return 2, uapi.FailInfo{}, nil
}

func (r *recordingDevice) GetService(id uint32) (uapi.SvcDesc, error) {
	d := r.desc
	d.SvcID = id
	return d, nil
}
