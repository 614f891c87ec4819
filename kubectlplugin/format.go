package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
)

// WriteJSON writes v as indented JSON, for scripts (-o json).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// maxNodesShown bounds the node names a lease's row lists; -o json has
// them all.
const maxNodesShown = 3

// WriteVNIs prints the leases, then the quarantined VNIs, as tables. now
// is the time ages are counted to.
func WriteVNIs(w io.Writer, v VNIs, now time.Time) error {
	tw := newTable(w)
	if len(v.Leases) == 0 {
		fmt.Fprintln(tw, "No VNI leases.")
	} else {
		fmt.Fprintln(tw, "VNI\tSCOPE\tOWNER\tNODES\tAGE\tSTATUS")
		for _, l := range v.Leases {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", l.VNI, orDash(l.Scope), ownerString(l), nodesString(l.Nodes), age(l.Created, now), leaseStatus(l))
		}
	}
	if len(v.Quarantine) > 0 {
		fmt.Fprintln(tw, "\nQUARANTINED VNI\tRELEASED")
		for _, q := range v.Quarantine {
			rel := "-"
			if !q.Released.IsZero() {
				rel = age(q.Released, now) + " ago"
			}
			fmt.Fprintf(tw, "%d\t%s\n", q.VNI, rel)
		}
	}
	return tw.Flush()
}

// ownerString is "Kind namespace/name", the lease key where the owner is
// unnamed.
func ownerString(l Lease) string {
	o := l.Owner
	if o.Name == "" {
		return orDash(l.Key)
	}
	name := o.Name
	if o.Namespace != "" {
		name = o.Namespace + "/" + name
	}
	if o.Kind == "" {
		return name
	}
	return o.Kind + " " + name
}

// nodesString is the count and the first names: "2: n1,n2",
// "5: n1,n2,n3,+2".
func nodesString(nodes []string) string {
	if len(nodes) == 0 {
		return "0"
	}
	shown := nodes[:min(len(nodes), maxNodesShown)]
	s := strconv.Itoa(len(nodes)) + ": " + strings.Join(shown, ",")
	if more := len(nodes) - len(shown); more > 0 {
		s += ",+" + strconv.Itoa(more)
	}
	return s
}

func leaseStatus(l Lease) string {
	switch {
	case l.OwnerGone && len(l.Nodes) > 0:
		return "owner gone, freed when no node holds it"
	case l.OwnerGone:
		return "owner gone, being freed"
	case len(l.Nodes) == 0:
		return "leased, no node holds it"
	}
	return "held"
}

// age is how long before now t was, as kubectl prints ages: 45s, 12m,
// 5h, 3d.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < 2*time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < 2*time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// WritePod prints the pod view: a summary, then its services and claims.
func WritePod(w io.Writer, v *PodView) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Pod:\t%s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(tw, "UID:\t%s\n", orDash(v.UID))
	fmt.Fprintf(tw, "Node:\t%s (agent %s)\n", v.Node, v.Agent)
	fmt.Fprintf(tw, "VNI:\t%d (%s scope)\n", v.VNI, orDash(v.Scope))
	if v.Lease != nil {
		fmt.Fprintf(tw, "Lease:\t%s, owner %s, held by %s\n", v.Lease.Name, ownerString(*v.Lease), nodesString(v.Lease.Nodes))
	}
	fmt.Fprintf(tw, "State:\t%s\n", orDash(v.State))
	fmt.Fprintf(tw, "NICs:\t%s\n", orDash(strings.Join(v.NICs, ",")))
	fmt.Fprintf(tw, "HSN:\t%s\n", orDash(v.HSN))
	if len(v.Addresses) > 0 {
		fmt.Fprintf(tw, "Addresses:\t%s\n", strings.Join(v.Addresses, ", "))
	}
	if v.Collectives != "" {
		fmt.Fprintf(tw, "Collectives:\t%s (hardware collectives at the fabric manager)\n", v.Collectives)
	}
	for _, n := range v.Notes {
		fmt.Fprintf(tw, "Note:\t%s\n", n)
	}
	// The tables below align among themselves, not with the summary.
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = newTable(w)
	if len(v.Services) == 0 {
		fmt.Fprintln(tw, "\nNo CXI services.")
	} else {
		fmt.Fprintln(tw, "\nNIC\tSVC\tENABLED\tVNIS\tTCS\tRESERVED\tMEMBERS")
		for _, s := range v.Services {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.NIC, s.ID, yesNo(s.Enabled), vniList(s.VNIs), orDash(s.TCs),
				reservedList(s.Reserved), orDash(strings.Join(s.Members, ",")))
		}
	}
	if len(v.Claims) > 0 {
		fmt.Fprintln(tw, "\nCLAIM\tVNI\tDEVICES\tSERVICES\tSTATE")
		for _, c := range v.Claims {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", c.Name, c.VNI, orDash(strings.Join(c.Devices, ",")), orDash(strings.Join(c.Services, ",")), c.State)
		}
	}
	if len(v.ResourceClaims) > 0 {
		fmt.Fprintln(tw, "\nRESOURCECLAIM\tALLOCATED DEVICES")
		for _, c := range v.ResourceClaims {
			fmt.Fprintf(tw, "%s\t%s\n", c.Name, orDash(strings.Join(c.Devices, ",")))
		}
	}
	return tw.Flush()
}

// WriteNodes prints one row per node, then the errors that kept agents'
// reports.
func WriteNodes(w io.Writer, nodes []NodeView) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tAGENT\tVERSION\tNICS\tUNHEALTHY\tSERVICES\tPODS\tTLE POOLS\tPOD VNI POOL\tIP POOLS\tTAINTS")
	var errs []string
	for _, n := range nodes {
		taints := orDash(strings.Join(n.Taints, ","))
		r := n.Report
		if r == nil {
			state := "none"
			if n.Agent != "" {
				state = "error"
				errs = append(errs, fmt.Sprintf("%s: %s", n.Name, n.Error))
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", n.Name, state, taints)
			continue
		}
		// An agent older than 0.2.0 reports no version: "-".
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", n.Name, readyString(r.Ready), orDash(r.Version), nicsString(r.NICs), unhealthy(r.NICs),
			podServices(r), len(r.Pods)+len(r.Claims), tlePools(r.Reservations), poolString(r.PodVNIPool), ipPools(r), taints)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range errs {
		if _, err := fmt.Fprintln(w, "error: node "+e); err != nil {
			return err
		}
	}
	return nil
}

func readyString(ready bool) string {
	if ready {
		return "ready"
	}
	return "not ready"
}

// tlePools is the node's free TLE pools over all it has, "5/8 free": a
// pod reserving TLEs needs one of its own on each NIC it binds (at most 3
// per NIC, the default service holding one); "-" when the agent reports
// no reservations.
func tlePools(rs []inspect.Reservation) string {
	free, all, seen := 0, 0, false
	for _, r := range rs {
		if r.Resource == "TLE pools" {
			free, all, seen = free+r.Free, all+r.Max, true
		}
	}
	if !seen {
		return "-"
	}
	return fmt.Sprintf("%d/%d free", free, all)
}

// nicsString is "healthy/total healthy".
func nicsString(nics []inspect.NIC) string {
	ok := 0
	for _, n := range nics {
		if n.Healthy {
			ok++
		}
	}
	return fmt.Sprintf("%d/%d healthy", ok, len(nics))
}

// unhealthy names the unhealthy NICs and why: "cxi1 (link down)".
func unhealthy(nics []inspect.NIC) string {
	var s []string
	for _, n := range nics {
		if n.Healthy {
			continue
		}
		if n.Reason != "" {
			s = append(s, n.Name+" ("+n.Reason+")")
		} else {
			s = append(s, n.Name)
		}
	}
	return orDash(strings.Join(s, ", "))
}

// podServices counts the services the agent made for pods (which name
// their pod) and for DRA claims (which the claims name): neither the
// driver's system services nor other tools' are counted.
func podServices(r *inspect.Report) int {
	n := 0
	for _, s := range r.Services {
		if s.Pod != "" {
			n++
		}
	}
	for _, c := range r.Claims {
		n += len(c.Services)
	}
	return n
}

func poolString(p *inspect.Pool) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d free", p.Free, p.Total)
}

// ipPools is, per IP pool, the addresses in use and the slices held:
// "hsn:3 in 1 slice".
func ipPools(r *inspect.Report) string {
	if r.IPAM == nil || len(r.IPAM.Pools) == 0 {
		return "-"
	}
	var s []string
	for _, p := range r.IPAM.Pools {
		used := 0
		for _, sl := range p.Slices {
			used += sl.Used
		}
		unit := "slices"
		if len(p.Slices) == 1 {
			unit = "slice"
		}
		s = append(s, fmt.Sprintf("%s:%d in %d %s", p.Name, used, len(p.Slices), unit))
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// reservedList is a service's reservations by resource, sorted:
// "LEs=128,PTEs=48,TXQs=16"; "-" for none.
func reservedList(r map[string]int) string {
	s := make([]string, 0, len(r))
	for _, name := range slices.Sorted(maps.Keys(r)) {
		s = append(s, name+"="+strconv.Itoa(r[name]))
	}
	return orDash(strings.Join(s, ","))
}

func vniList(v []uint16) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = itoa(x)
	}
	return orDash(strings.Join(s, ","))
}
