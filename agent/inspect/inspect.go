// Package inspect is the node admin's view of a running agent: its NICs,
// the CXI services on them, the pods it serves and their VNI leases, and
// the GPU machine-type units. The agent serves a [Report] as JSON on its
// local HTTP endpoint; `slingshot-agent inspect` fetches and prints it.
package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
)

// Path is the agent's HTTP path that serves the report.
const Path = "/inspect"

// Report is a snapshot of the agent's state.
type Report struct {
	Node string `json:"node"`
	// Version is the agent's release; empty in the report of an agent
	// older than 0.2.0, which had none.
	Version   string    `json:"version,omitempty"`
	Ready     bool      `json:"ready"`
	Generated time.Time `json:"generated"`
	NICs      []NIC     `json:"nics"`
	Services  []Service `json:"services"`
	Pods      []Pod     `json:"pods"`
	// Units are the GPU machine-type units, if the node has a machine type.
	Units []Unit `json:"units,omitempty"`
	// PodVNIPool is the local pod-scoped VNI pool's fill, if any.
	PodVNIPool *Pool `json:"podVNIPool,omitempty"`
	// IPAM is the node's addresses on the high-speed network: its slices
	// of each IP pool and every address handed out.
	IPAM *ipam.Snapshot `json:"ipam,omitempty"`
	// Claims are the DRA claims prepared on the node (--api=dra).
	Claims []Claim `json:"claims,omitempty"`
	// Reservations are what the services of each NIC reserve of its
	// resources and pools.
	Reservations []Reservation `json:"reservations,omitempty"`
}

// Claim is one DRA claim the node prepared.
type Claim struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	UID       string   `json:"uid"`
	VNI       uint16   `json:"vni"`
	Scope     string   `json:"scope"`
	Devices   []string `json:"devices"`
	// Services are "cxi0:12", bound ones with their namespace: "cxi0:12@4026532000".
	Services []string `json:"services"`
	// BoundPod is the UID of the pod whose namespace the services admit.
	BoundPod string `json:"boundPod,omitempty"`
	// State is "preparing", "prepared", "bound" or "unpreparing".
	State string `json:"state"`
	// Collectives is the job's hardware-collectives reservation at the
	// fabric manager (FI_CXI_COLL_JOB_ID), "" when it has none.
	Collectives string `json:"collectives,omitempty"`
}

// NIC is one Slingshot NIC.
type NIC struct {
	Name       string `json:"name"`
	PCIAddress string `json:"pciAddress"`
	NetDev     string `json:"netdev,omitempty"`
	NUMANode   int    `json:"numaNode"`
	Link       bool   `json:"link"`
	SpeedMbps  int    `json:"speedMbps"`
	Healthy    bool   `json:"healthy"`
	Reason     string `json:"reason,omitempty"`
	// Allocated counts the device-plugin shares of this NIC in use.
	Allocated int `json:"allocated"`
	Shares    int `json:"shares"`
}

// Service is one CXI service as the driver lists it.
type Service struct {
	NIC     string   `json:"nic"`
	ID      uint32   `json:"id"`
	Enabled bool     `json:"enabled"`
	System  bool     `json:"system"`
	VNIs    []uint16 `json:"vnis"`
	Members []string `json:"members"` // "netns=4026532000", "uid=1000", "all"
	// Pod is "namespace/name" when the agent made the service for a pod.
	Pod string `json:"pod,omitempty"`
	// TCs are its traffic classes in SLINGSHOT_TCS form ("0xa").
	TCs string `json:"tcs,omitempty"`
	// Reserved is what it reserves, by resource ("LEs"); absent: nothing.
	Reserved map[string]int `json:"reserved,omitempty"`
}

// Pod is one pod the agent serves.
type Pod struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	UID       string   `json:"uid,omitempty"`
	VNI       uint16   `json:"vni"`
	Scope     string   `json:"scope"`
	NICs      []string `json:"nics"`
	State     string   `json:"state"` // "running", "cleaning up"
	// HSN is the pod's hsn interfaces, "hsn0 10.150.3.7/16 on hsn0", one
	// per NIC with allNICs: "hsn0 ... on hsn0, hsn1 10.151.0.4/16 on hsn1".
	HSN string `json:"hsn,omitempty"`
	// Collectives is the job's hardware-collectives reservation at the
	// fabric manager (FI_CXI_COLL_JOB_ID), "" when it has none.
	Collectives string `json:"collectives,omitempty"`
}

// Unit is one GPU machine-type unit.
type Unit struct {
	MachineType string   `json:"machineType"`
	ID          string   `json:"id"`
	GPUs        []string `json:"gpus"`
	NICs        []string `json:"nics"`
	NUMANode    int      `json:"numaNode"`
	Healthy     bool     `json:"healthy"`
	Allocated   bool     `json:"allocated"`
}

// Pool is the fill of a local pool.
type Pool struct {
	Free  int `json:"free"`
	Total int `json:"total"`
}

// Fetch gets the report from an agent's HTTP endpoint, e.g.
// "http://127.0.0.1:9479".
func Fetch(ctx context.Context, base string) (*Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+Path, nil)
	if err != nil {
		return nil, fmt.Errorf("inspect request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach agent at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("agent at %s: %s: %s", base, resp.Status, strings.TrimSpace(string(b)))
	}
	var r Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode inspect report: %w", err)
	}
	return &r, nil
}

// Handler serves the report that get returns, as JSON. get receives the
// request's context.
func Handler(get func(context.Context) *Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(get(r.Context()))
	})
}

// WriteTable prints the report as tables for a person.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ready := "ready"
	if !r.Ready {
		ready = "NOT READY"
	}
	fmt.Fprintf(tw, "Node %s (%s)\n\n", r.Node, ready)

	fmt.Fprintln(tw, "NIC\tPCI\tNETDEV\tNUMA\tLINK\tSPEED\tHEALTH\tSHARES")
	for _, n := range r.NICs {
		health := "healthy"
		if !n.Healthy {
			health = "unhealthy"
			if n.Reason != "" {
				health += ": " + n.Reason
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d/%d\n", n.Name, n.PCIAddress, orDash(n.NetDev), n.NUMANode,
			upDown(n.Link), speed(n.SpeedMbps), health, n.Allocated, n.Shares)
	}

	fmt.Fprintln(tw, "\nNIC\tSVC\tENABLED\tVNIS\tMEMBERS\tPOD")
	for _, s := range r.Services {
		id := strconv.FormatUint(uint64(s.ID), 10)
		if s.System {
			id += " (system)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.NIC, id, yesNo(s.Enabled), vniList(s.VNIs),
			strings.Join(s.Members, ","), orDash(s.Pod))
	}

	writeReservations(tw, r.Reservations)

	fmt.Fprintln(tw, "\nPOD\tUID\tVNI\tSCOPE\tNICS\tHSN\tSTATE")
	for _, p := range r.Pods {
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, orDash(p.UID), p.VNI, p.Scope,
			strings.Join(p.NICs, ","), orDash(p.HSN), p.State)
	}
	if len(r.Units) > 0 {
		fmt.Fprintln(tw, "\nMACHINE TYPE\tUNIT\tGPUS\tNICS\tNUMA\tHEALTH\tALLOCATED")
		for _, u := range r.Units {
			health := "healthy"
			if !u.Healthy {
				health = "unhealthy"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", u.MachineType, u.ID, strings.Join(u.GPUs, ","),
				strings.Join(u.NICs, ","), u.NUMANode, health, yesNo(u.Allocated))
		}
	}
	if len(r.Claims) > 0 {
		fmt.Fprintln(tw, "\nCLAIM\tUID\tVNI\tSCOPE\tDEVICES\tSERVICES\tSTATE")
		for _, c := range r.Claims {
			fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", c.Namespace, c.Name, c.UID, c.VNI, orDash(c.Scope),
				strings.Join(c.Devices, ","), orDash(strings.Join(c.Services, ",")), c.State)
		}
	}
	if r.PodVNIPool != nil {
		fmt.Fprintf(tw, "\nLocal pod VNI pool: %d free of %d\n", r.PodVNIPool.Free, r.PodVNIPool.Total)
	}
	if r.IPAM != nil {
		writeIPAM(tw, r.IPAM)
	}
	return tw.Flush()
}

// writeIPAM prints the node's IP pools, slices and addresses.
func writeIPAM(w io.Writer, s *ipam.Snapshot) {
	fmt.Fprintln(w, "\nIP POOL\tPREFIX\tSLICE\tSLICE PREFIX\tUSED\tFILL\tSTATE")
	for _, p := range s.Pools {
		if len(p.Slices) == 0 {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t0\t-\tno slice held\n", p.Name, p.Prefix)
		}
		for _, sl := range p.Slices {
			state := "open"
			if sl.Returning {
				state = "returning"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%.0f%%\t%s\n", p.Name, p.Prefix, sl.Index, sl.Prefix, sl.Used, 100*sl.Fill, state)
		}
	}
	fmt.Fprintln(w, "\nADDRESS\tPOOL\tOWNER\tPOD\tSINCE")
	for _, a := range s.Allocations {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.Address, a.Pool, a.Owner, orDash(a.Pod), a.Since.UTC().Format(time.RFC3339))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func upDown(b bool) string {
	if b {
		return "up"
	}
	return "down"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func speed(mbps int) string {
	if mbps <= 0 {
		return "-"
	}
	return strconv.Itoa(mbps/1000) + "G"
}

func vniList(v []uint16) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(int(x))
	}
	return orDash(strings.Join(s, ","))
}
