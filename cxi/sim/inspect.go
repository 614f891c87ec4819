package sim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Service is what the simulated driver holds for one service, for tests
// and inspection.
type Service struct {
	// Desc is the stored descriptor, as SVC_GET returns it.
	Desc uapi.SvcDesc
	// Name is "default" for service 1, "ethernet-svc" for cxi_eth's
	// Ethernet service and "user" for the others.
	Name string
	// LNIs is the number of LNIs using the service (see SetInUse).
	LNIs int
	// UIDs, GIDs and NetNS are its access-control entries; Open means
	// anyone may use it.
	UIDs, GIDs, NetNS []uint32
	Open              bool
	// LEPool is the LE pool it allocates from (0: shared); TLEPool the
	// TLE pool (0: the default service's).
	LEPool, TLEPool int
	// RMUEntries is how many RMU VNI-list entries its enabled RX
	// profiles hold.
	RMUEntries int
	// VNIMin and VNIMax are the VNI range SVC_SET_VNI_RANGE gave a
	// service with restricted_vnis=0; both 0 when it has none.
	VNIMin, VNIMax uint32
}

// Services returns the services in ID order.
func (d *Device) Services() ([]Service, error) {
	var out []Service
	err := d.view(func(st *state) syscall.Errno {
		for _, s := range st.Services {
			out = append(out, s.export())
		}
		return 0
	})
	if err != nil {
		return nil, fmt.Errorf("list simulated services: %w", err)
	}
	return out, nil
}

func (s *service) export() Service {
	out := Service{
		Desc: s.Desc, Name: s.Name, LNIs: s.LNIs,
		UIDs: slices.Clone(s.ACL.UIDs), GIDs: slices.Clone(s.ACL.GIDs), NetNS: slices.Clone(s.ACL.NetNS),
		Open: s.ACL.Open, LEPool: s.LEPool, TLEPool: s.TLEPool, RMUEntries: s.RMU,
	}
	if r := s.Range; r != nil {
		out.VNIMin, out.VNIMax = uint32(r.Match), uint32(r.Match)+uint32(r.Ignore)
	}
	return out
}

// SetInUse records that lnis LNIs use service id, as processes allocating
// LNIs on it would; while lnis > 0, SVC_DESTROY and SVC_ENABLE fail with
// EBUSY. Like LNI allocation it needs an enabled service (the error wraps
// EKEYREVOKED otherwise) and an existing one (EINVAL).
func (d *Device) SetInUse(id uint32, lnis int) error {
	err := d.update(func(st *state) (bool, syscall.Errno) {
		errno := st.setInUse(id, lnis)
		return errno == 0, errno
	})
	if err != nil {
		return fmt.Errorf("mark service %d in use by %d LNIs: %w", id, lnis, err)
	}
	return nil
}

// rsrcDumpOrder is the column order of the driver's debugfs tables.
var rsrcDumpOrder = []struct {
	name string
	t    uapi.RsrcType
}{
	{"ACs", uapi.RsrcAC}, {"CTs", uapi.RsrcCT}, {"EQs", uapi.RsrcEQ}, {"PTEs", uapi.RsrcPTE},
	{"TGQs", uapi.RsrcTGQ}, {"TXQs", uapi.RsrcTXQ},
	{"LE0s", uapi.RsrcLE}, {"LE1s", uapi.RsrcLE}, {"LE2s", uapi.RsrcLE}, {"LE3s", uapi.RsrcLE},
	{"TLEs", uapi.RsrcTLE},
}

const debugHeader = "           ACs     CTs     EQs    PTEs    TGQs    TXQs    LE0s    LE1s    LE2s    LE3s    TLEs\n"

// WriteDebugServices writes a listing in the layout of the driver's
// debugfs file /sys/kernel/debug/cxi/cxiN/services: the device's
// resources (Max, Res, Alloc, Avail), one "Rgroups" block per service,
// then the VNI profiles. The simulation allocates no LNI resources, so
// Alloc and "In use" are zero.
func (d *Device) WriteDebugServices(w io.Writer) error {
	var buf strings.Builder
	err := d.view(func(st *state) syscall.Errno {
		writeDebug(&buf, st)
		return 0
	})
	if err != nil {
		return fmt.Errorf("dump simulated services: %w", err)
	}
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString(buf.String()); err != nil {
		return err
	}
	return bw.Flush()
}

func writeDebug(b *strings.Builder, st *state) {
	b.WriteString("Resources\n")
	b.WriteString(debugHeader)
	row := func(label string, val func(uapi.RsrcType) int) {
		b.WriteString(label)
		for _, c := range rsrcDumpOrder {
			fmt.Fprintf(b, "  %6d", val(c.t))
		}
		b.WriteString("\n")
	}
	row("  Max ", func(t uapi.RsrcType) int { return int(st.Max[t]) })
	row("  Res ", func(t uapi.RsrcType) int { return int(st.Max[t]) - int(st.shared(t)) })
	row("Alloc ", func(uapi.RsrcType) int { return 0 })
	row("Avail ", func(t uapi.RsrcType) int { return int(st.shared(t)) })
	b.WriteString("\nRgroups:")
	for _, s := range st.Services {
		state := "Disabled"
		if s.Desc.Enable {
			state = "Enabled"
		}
		fmt.Fprintf(b, "\nID: %d\n", s.Desc.SvcID)
		fmt.Fprintf(b, "  Name:%s\n", s.Name)
		fmt.Fprintf(b, "  State:%s\n", state)
		fmt.Fprintf(b, "  LNIs/RGID:%d\n", s.LNIsPerRGID)
		fmt.Fprintf(b, "  System service:%d\n", boolInt(s.Desc.IsSystemSvc))
		fmt.Fprintf(b, "  Counter pool ID:%d\n", s.Desc.CntrPoolID)
		fmt.Fprintf(b, "  LE pool IDs: %d %d %d %d  TLE pool ID: %d\n", s.LEPool, s.LEPool, s.LEPool, s.LEPool, s.TLEPool)
		writeACL(b, s.ACL)
		b.WriteString(debugHeader)
		entryRow := func(label string, val func(*uapi.Limits) int, missing func(uapi.RsrcType) int) {
			b.WriteString(label)
			for _, c := range rsrcDumpOrder {
				v := missing(c.t)
				if e := s.Rsrc[c.t]; e != nil {
					v = val(e)
				}
				fmt.Fprintf(b, "%6d  ", v)
			}
			b.WriteString("\n")
		}
		zero := func(uapi.RsrcType) int { return 0 }
		entryRow("  Max   ", func(e *uapi.Limits) int { return int(e.Max) }, zero)
		entryRow("  Res   ", func(e *uapi.Limits) int { return int(e.Res) }, zero)
		// The driver prints -1 for pool-backed types it cannot look up.
		entryRow("In use  ", func(*uapi.Limits) int { return 0 }, func(t uapi.RsrcType) int {
			if t == uapi.RsrcLE || t == uapi.RsrcTLE {
				return -1
			}
			return 0
		})
	}
	b.WriteString("\nRX/TX profiles:\n")
	for _, s := range st.Services {
		state := "disabled"
		if s.RMU > 0 {
			state = "enabled"
		}
		for _, p := range s.profiles() {
			vnis := fmt.Sprint(p.Match)
			if p.Ignore != 0 {
				vnis += fmt.Sprintf("-%d", uint32(p.Match)+uint32(p.Ignore))
			}
			fmt.Fprintf(b, "  svc:%d VNI:%s state:%s\n", s.Desc.SvcID, vnis, state)
		}
	}
	fmt.Fprintf(b, "  RMU VNI-list entries in use: %d of %d\n", st.rmuUsed(), numRMUEntries)
}

// writeACL prints the access-control entries in the driver's format; IDs
// are numbered in the order the entries were added.
func writeACL(b *strings.Builder, a acl) {
	type entry struct {
		typ string
		val uint32
	}
	var entries []entry
	if a.Open {
		entries = append(entries, entry{"open", 0})
	}
	for _, u := range a.UIDs {
		entries = append(entries, entry{"uid", u})
	}
	for _, g := range a.GIDs {
		entries = append(entries, entry{"gid", g})
	}
	for _, n := range a.NetNS {
		entries = append(entries, entry{"netns", n})
	}
	b.WriteString("  AC-entries: ")
	for i, e := range entries {
		sep := ", "
		if i == len(entries)-1 {
			sep = ""
		}
		fmt.Fprintf(b, "ID:%d type:%s uid/gid:%d%s", i+1, e.typ, e.val, sep)
	}
	b.WriteString("\n")
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
