package gpu

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Locality says how close the GPUs of a unit are to each other.
type Locality int

// Localities from loosest to tightest.
const (
	// LocalityNUMA: one NUMA node, more than one root complex.
	LocalityNUMA Locality = iota + 1
	// LocalityRootComplex: one PCIe root complex, different root ports.
	LocalityRootComplex
	// LocalitySwitch: below one root port, so behind one PCIe switch.
	LocalitySwitch
	// LocalitySingle: the unit has one GPU.
	LocalitySingle
)

func (l Locality) String() string {
	switch l {
	case LocalityNUMA:
		return "numa"
	case LocalityRootComplex:
		return "root-complex"
	case LocalitySwitch:
		return "pcie-switch"
	case LocalitySingle:
		return "single-gpu"
	}
	return "Locality(" + strconv.Itoa(int(l)) + ")"
}

// ExclusionKind says why a GPU is in no unit.
type ExclusionKind int

// Reasons a GPU is left out of every unit.
const (
	// ExcludedVendor: the GPU is not of the machine type's vendor.
	ExcludedVendor ExclusionKind = iota + 1
	// ExcludedProduct: the GPU's product does not match the machine
	// type's product or family (or is unknown while one is set).
	ExcludedProduct
	// ExcludedUnhealthy: discovery reported problems with the GPU.
	ExcludedUnhealthy
	// ExcludedLeftover: its NUMA node has fewer matching GPUs left than a
	// unit takes.
	ExcludedLeftover
	// ExcludedNoNIC: its unit could not get the machine type's NICs from
	// its NUMA node.
	ExcludedNoNIC
)

func (k ExclusionKind) String() string {
	switch k {
	case ExcludedVendor:
		return "vendor"
	case ExcludedProduct:
		return "product"
	case ExcludedUnhealthy:
		return "unhealthy"
	case ExcludedLeftover:
		return "leftover"
	case ExcludedNoNIC:
		return "no-nic"
	}
	return "ExclusionKind(" + strconv.Itoa(int(k)) + ")"
}

// Excluded is a GPU left out of every unit.
type Excluded struct {
	PCIAddress string
	Kind       ExclusionKind
	// Reason is a sentence for the agent's log: "GPU 0000:17:00.0 is
	// 'NVIDIA A100-SXM4-80GB', machine type compute-xlarge wants family
	// H100".
	Reason string
}

func (e Excluded) String() string { return e.Reason }

// Unit is one allocatable instance of a machine type: Count GPUs of one
// NUMA node and their nearest NICs.
type Unit struct {
	// ID is the device-plugin ID: the first GPU's PCI address, "x" and the
	// GPU count, and a hash of every GPU's and NIC's PCI address,
	// "0000:17:00.0-x2-5f3a09c1". It is at most 30 characters, the same
	// whenever the same hardware is carved the same way, and never reused
	// for another set of GPUs and NICs.
	ID string
	// MachineType is the machine type's name.
	MachineType string
	// NUMANode is the NUMA node of every GPU and NIC of the unit; -1 when
	// the platform reports none.
	NUMANode int
	// Locality is how close the GPUs are.
	Locality Locality
	// GPUs are sorted by PCI address.
	GPUs []GPU
	// NICs are nearest first: same PCIe switch, then same root complex,
	// then the rest of the NUMA node.
	NICs []NIC
	// SharedNICs names the NICs of this unit that other units hold too
	// (only with [CarveOptions.ShareNICs]).
	SharedNICs []string
	// Healthy reports whether the unit may be allocated: the node pool
	// mode is ready. Reason says why not.
	Healthy bool
	Reason  string
}

// NUMANodes returns the unit's NUMA node as the device-plugin API wants
// it: one node, or none when unknown.
func (u *Unit) NUMANodes() []int64 {
	if u.NUMANode < 0 {
		return nil
	}
	return []int64{int64(u.NUMANode)}
}

// NICNames returns the names of the unit's NICs, in order.
func (u *Unit) NICNames() []string {
	names := make([]string, len(u.NICs))
	for i, n := range u.NICs {
		names[i] = n.Name
	}
	return names
}

// CarveOptions tune [Carve].
type CarveOptions struct {
	// Mode is the node pool mode (ModeReady, ModeMaintenance,
	// ModeNotReady); empty means ready. Units are healthy only when ready.
	Mode string
	// ShareNICs lets a unit that finds no free NIC on its NUMA node share
	// the least-shared NICs of that node with other units. Without it such
	// a unit is not formed and its GPUs are reported ExcludedNoNIC.
	ShareNICs bool
}

// Carving is the result of [Carve]: the node's units of one machine type.
type Carving struct {
	MachineType MachineType
	// Mode is the node pool mode the units' health follows.
	Mode string
	// Units are ordered by NUMA node, then tightest locality, then first
	// GPU address.
	Units []Unit
	// Excluded are the GPUs in no unit, by PCI address.
	Excluded []Excluded
	// FreeNICs are the NICs in no unit.
	FreeNICs []NIC

	byID map[string]int
}

// Unit returns the unit with the given ID.
func (c *Carving) Unit(id string) (*Unit, bool) {
	i, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	return &c.Units[i], true
}

// Carve cuts the GPUs into units of the machine type mt and gives each unit
// its mt.NICsPerUnit nearest NICs.
//
// Only healthy GPUs of mt's vendor whose product matches are carved (see
// [Matches]); the others are Excluded with a reason. A unit is mt.GPU.Count
// GPUs of one NUMA node: carving packs GPUs below one PCIe switch first,
// then below one root complex, then anywhere on the NUMA node, so units are
// as local as the count allows, and a NUMA node with n matching GPUs gives
// n/Count units; the rest are Excluded as leftovers. GPUs with unknown NUMA
// node (-1) form units among themselves.
//
// NICs: each unit takes NICsPerUnit NICs of its own NUMA node, nearest
// first (same switch, same root complex, then the node), level by level so
// that no unit takes another's switch-local NIC while a NIC of its own
// switch is free. NICs never cross
// NUMA nodes and, by default, are exclusive: when a NUMA node has too few,
// units are dropped, loosest locality first, until the rest have all their
// NICs; the dropped units' GPUs are Excluded with ExcludedNoNIC. So every
// unit that exists has all its NICs, and a node with N NICs on a NUMA node
// gives that node N/NICsPerUnit units at most. With opts.ShareNICs those units share the node's
// least-shared NICs instead, and are formed whenever the node has at least
// NICsPerUnit NICs. NICsPerUnit 0 gives units without NICs.
//
// The result depends only on the set of GPUs and NICs, not their order.
// Carve returns an error wrapping [ErrInvalidMachineType] or
// [ErrInvalidMode] for a machine type or mode it cannot carve.
func Carve(gpus []GPU, nics []NIC, mt MachineType, opts CarveOptions) (*Carving, error) {
	if err := checkMachineType(mt); err != nil {
		return nil, err
	}
	healthy, reason, err := modeHealth(opts.Mode)
	if err != nil {
		return nil, err
	}
	c := &Carving{MachineType: mt, Mode: cmp.Or(opts.Mode, ModeReady), byID: map[string]int{}}

	sorted := slices.Clone(gpus)
	slices.SortStableFunc(sorted, func(a, b GPU) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
	byNUMA := map[int][]*GPU{}
	seen := map[string]bool{}
	for i := range sorted {
		g := &sorted[i]
		if seen[g.PCIAddress] {
			continue
		}
		seen[g.PCIAddress] = true
		if kind, why := exclude(g, mt); kind != 0 {
			c.Excluded = append(c.Excluded, Excluded{PCIAddress: g.PCIAddress, Kind: kind, Reason: why})
			continue
		}
		byNUMA[g.NUMANode] = append(byNUMA[g.NUMANode], g)
	}

	nicsByNUMA := map[int][]*NIC{}
	sortedNICs := slices.Clone(nics)
	slices.SortStableFunc(sortedNICs, func(a, b NIC) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
	seenNIC := map[string]bool{}
	for i := range sortedNICs {
		n := &sortedNICs[i]
		if seenNIC[n.Name] {
			continue
		}
		seenNIC[n.Name] = true
		nicsByNUMA[n.NUMANode] = append(nicsByNUMA[n.NUMANode], n)
	}
	used := map[string]bool{}

	numas := make([]int, 0, len(byNUMA))
	for n := range byNUMA {
		numas = append(numas, n)
	}
	slices.Sort(numas)
	for _, numa := range numas {
		groups, leftover := packNUMA(byNUMA[numa], mt.GPU.Count)
		for _, g := range leftover {
			c.Excluded = append(c.Excluded, Excluded{PCIAddress: g.PCIAddress, Kind: ExcludedLeftover,
				Reason: fmt.Sprintf("GPU %s is left over: NUMA node %d has %d matching GPUs, machine type %s takes %d per unit",
					g.PCIAddress, numa, len(byNUMA[numa]), mt.Name, mt.GPU.Count)})
		}
		units := make([]Unit, len(groups))
		for i, grp := range groups {
			units[i] = Unit{MachineType: mt.Name, NUMANode: numa, Locality: localityOf(grp),
				GPUs: make([]GPU, len(grp)), Healthy: healthy, Reason: reason}
			for j, g := range grp {
				units[i].GPUs[j] = *g
			}
		}
		slices.SortStableFunc(units, func(a, b Unit) int {
			return cmp.Or(cmp.Compare(b.Locality, a.Locality), strings.Compare(a.GPUs[0].PCIAddress, b.GPUs[0].PCIAddress))
		})
		units, dropped := assignNICs(units, nicsByNUMA[numa], mt.NICsPerUnit, opts.ShareNICs)
		for _, u := range dropped {
			for _, g := range u.GPUs {
				c.Excluded = append(c.Excluded, Excluded{PCIAddress: g.PCIAddress, Kind: ExcludedNoNIC,
					Reason: fmt.Sprintf("GPU %s is left out: NUMA node %d has %d Slingshot NICs, too few for another unit of %s with %d NICs each%s",
						g.PCIAddress, numa, len(nicsByNUMA[numa]), mt.Name, mt.NICsPerUnit, shareHint(opts.ShareNICs))})
			}
		}
		for i := range units {
			u := &units[i]
			u.ID = unitID(u)
			for _, n := range u.NICs {
				used[n.Name] = true
			}
			c.byID[u.ID] = len(c.Units)
			c.Units = append(c.Units, *u)
		}
	}
	for _, n := range sortedNICs {
		if !used[n.Name] {
			used[n.Name] = true
			c.FreeNICs = append(c.FreeNICs, n)
		}
	}
	slices.SortStableFunc(c.Excluded, func(a, b Excluded) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
	return c, nil
}

func shareHint(sharing bool) string {
	if sharing {
		return ""
	}
	return " (NICs are not shared unless NIC sharing is on)"
}

// checkMachineType returns an error wrapping ErrInvalidMachineType when mt
// cannot be carved. It repeats the checks of config validation, so that a
// caller that built mt by hand gets an error, not a strange carving.
func checkMachineType(mt MachineType) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidMachineType, mt.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case mt.Name == "":
		return bad("no name")
	case Vendor(mt.GPU.Type) != NVIDIA && Vendor(mt.GPU.Type) != AMD:
		return bad("gpu type %q is not nvidia or amd", mt.GPU.Type)
	case mt.GPU.Count < 1 || mt.GPU.Count > 64:
		return bad("gpu count %d is outside 1..64", mt.GPU.Count)
	case mt.GPU.Product != "" && mt.GPU.Family != "":
		return bad("set product or family, not both")
	case mt.NICsPerUnit < 0 || mt.NICsPerUnit > 16:
		return bad("nicsPerUnit %d is outside 0..16", mt.NICsPerUnit)
	}
	return nil
}

// modeHealth returns whether units of a node in the given mode are healthy.
func modeHealth(mode string) (bool, string, error) {
	switch mode {
	case "", ModeReady:
		return true, "", nil
	case ModeMaintenance, ModeNotReady:
		return false, "node pool mode is " + mode + ": no new allocations", nil
	}
	return false, "", fmt.Errorf("%w %q: want ready, maintenance or not-ready", ErrInvalidMode, mode)
}

// Matches says whether the machine type's gpu spec selects g: it returns 0
// and "" when it does, else ExcludedVendor or ExcludedProduct and a
// sentence naming the GPU for the agent's log. The vendor must be
// spec.Type. Product matches the GPU's product name ignoring case, with
// spaces and dashes taken as equal (so GPU feature discovery's label form
// "NVIDIA-H100-80GB-HBM3" selects "NVIDIA H100 80GB HBM3"); Family matches a
// case-insensitive substring of it ("H100", "MI250X"). A GPU whose product
// is unknown matches only a spec with neither.
func Matches(g *GPU, mtName string, spec GPUSpec) (ExclusionKind, string) {
	if string(g.Vendor) != spec.Type {
		return ExcludedVendor, fmt.Sprintf("GPU %s is %s %s, machine type %s wants %s",
			g.PCIAddress, g.Vendor, quoteProduct(g.Product), mtName, spec.Type)
	}
	switch {
	case spec.Product != "" && !strings.EqualFold(dashed(g.Product), dashed(spec.Product)):
		return ExcludedProduct, fmt.Sprintf("GPU %s is %s, machine type %s wants product '%s'",
			g.PCIAddress, quoteProduct(g.Product), mtName, spec.Product)
	case spec.Family != "" && (g.Product == "" || !strings.Contains(strings.ToLower(g.Product), strings.ToLower(spec.Family))):
		return ExcludedProduct, fmt.Sprintf("GPU %s is %s, machine type %s wants family %s",
			g.PCIAddress, quoteProduct(g.Product), mtName, spec.Family)
	}
	return 0, ""
}

func quoteProduct(p string) string {
	if p == "" {
		return "of unknown product"
	}
	return "'" + p + "'"
}

func dashed(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), " ", "-") }

// exclude returns why g is in no unit of mt, or 0. A GPU of the right
// vendor with problems is reported with them (they may be why its product
// is unknown) rather than as a product mismatch.
func exclude(g *GPU, mt MachineType) (ExclusionKind, string) {
	kind, why := Matches(g, mt.Name, mt.GPU)
	if kind == ExcludedVendor {
		return kind, why
	}
	if !g.Healthy() {
		msgs := make([]string, len(g.Problems))
		for i, p := range g.Problems {
			msgs[i] = p.Error()
		}
		return ExcludedUnhealthy, fmt.Sprintf("GPU %s is left out: %s", g.PCIAddress, strings.Join(msgs, "; "))
	}
	return kind, why
}

// pciNode is a node of the PCIe tree of one NUMA node's GPUs.
type pciNode struct {
	children map[string]*pciNode
	gpus     []*GPU
}

// packNUMA groups the GPUs of one NUMA node (sorted by address) into units
// of count, bottom-up through the PCIe tree: each subtree forms as many
// units as it can from its own GPUs and hands the rest to its parent, so
// GPUs below one switch end up together, and all leftovers meet at the
// top. It returns the groups and the GPUs left over.
func packNUMA(gpus []*GPU, count int) ([][]*GPU, []*GPU) {
	top := &pciNode{}
	for _, g := range gpus {
		n := top
		if g.Topology.Root != "" {
			for _, key := range append([]string{g.Topology.Root}, g.Topology.Bridges...) {
				if n.children == nil {
					n.children = map[string]*pciNode{}
				}
				child, ok := n.children[key]
				if !ok {
					child = &pciNode{}
					n.children[key] = child
				}
				n = child
			}
		}
		n.gpus = append(n.gpus, g)
	}
	var groups [][]*GPU
	var pack func(n *pciNode) []*GPU
	pack = func(n *pciNode) []*GPU {
		keys := make([]string, 0, len(n.children))
		for k := range n.children {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var pool []*GPU
		for _, k := range keys {
			pool = append(pool, pack(n.children[k])...)
		}
		pool = append(pool, n.gpus...)
		for len(pool) >= count {
			grp := slices.Clone(pool[:count])
			slices.SortFunc(grp, func(a, b *GPU) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
			groups = append(groups, grp)
			pool = pool[count:]
		}
		return pool
	}
	return groups, pack(top)
}

// localityOf returns how close a group of GPUs is.
func localityOf(grp []*GPU) Locality {
	if len(grp) == 1 {
		return LocalitySingle
	}
	least := -1
	for i := range grp {
		for j := i + 1; j < len(grp); j++ {
			if a := grp[i].Topology.Affinity(grp[j].Topology); least < 0 || a < least {
				least = a
			}
		}
	}
	switch {
	case least >= 2:
		return LocalitySwitch
	case least == 1:
		return LocalityRootComplex
	}
	return LocalityNUMA
}

// nicAffinity is the closest any GPU of u is to nic.
func nicAffinity(u *Unit, nic *NIC) int {
	best := 0
	for i := range u.GPUs {
		best = max(best, u.GPUs[i].Topology.Affinity(nic.Topology))
	}
	return best
}

// assignNICs gives each unit of one NUMA node (in priority order) per NICs
// from nics, as documented on Carve. It returns the units that got all
// their NICs, in the same order, and those dropped for want of NICs.
func assignNICs(units []Unit, nics []*NIC, per int, share bool) (kept, dropped []Unit) {
	if per == 0 {
		return units, nil
	}
	owner := map[*NIC]int{} // exclusive owner, by unit index
	held := make([][]*NIC, len(units))
	alive := make([]bool, len(units))
	for i := range alive {
		alive[i] = true
	}
	// take gives unit i free NICs with at least minAff, nearest first.
	take := func(i, minAff int) {
		type cand struct {
			n   *NIC
			aff int
		}
		var cands []cand
		for _, n := range nics {
			if _, taken := owner[n]; taken {
				continue
			}
			if a := nicAffinity(&units[i], n); a >= minAff {
				cands = append(cands, cand{n, a})
			}
		}
		slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.aff, a.aff) })
		for _, c := range cands {
			if len(held[i]) >= per {
				break
			}
			owner[c.n] = i
			held[i] = append(held[i], c.n)
		}
	}
	// Closest first: every unit takes the NICs below its own switch before
	// any unit takes one merely on its root complex, and those before any
	// elsewhere on the NUMA node.
	var levels []int
	for i := range units {
		for _, n := range nics {
			levels = append(levels, nicAffinity(&units[i], n))
		}
	}
	slices.Sort(levels)
	levels = slices.Compact(levels)
	for l := len(levels) - 1; l >= 0; l-- {
		for i := range units {
			take(i, levels[l])
		}
	}
	short := func() int {
		for i := len(units) - 1; i >= 0; i-- {
			if alive[i] && len(held[i]) < per {
				return i
			}
		}
		return -1
	}
	if share {
		shares := map[*NIC]int{}
		for n := range owner {
			shares[n] = 1
		}
		for i := range units {
			if len(held[i]) >= per {
				continue
			}
			cands := slices.DeleteFunc(slices.Clone(nics), func(n *NIC) bool { return slices.Contains(held[i], n) })
			slices.SortStableFunc(cands, func(a, b *NIC) int {
				return cmp.Or(cmp.Compare(shares[a], shares[b]), cmp.Compare(nicAffinity(&units[i], b), nicAffinity(&units[i], a)))
			})
			for _, n := range cands {
				if len(held[i]) >= per {
					break
				}
				held[i] = append(held[i], n)
				shares[n]++
			}
		}
		for i := range units {
			if len(held[i]) < per {
				alive[i] = false // the node has fewer than per NICs
			}
		}
		for i := range units {
			for _, n := range held[i] {
				if shares[n] > 1 {
					units[i].SharedNICs = append(units[i].SharedNICs, n.Name)
				}
			}
		}
	} else {
		// Drop the last short unit, free its NICs for the other short
		// ones, and repeat: the units that remain all have their NICs,
		// and there are as many as the NICs allow.
		for i := short(); i >= 0; i = short() {
			alive[i] = false
			for _, n := range held[i] {
				delete(owner, n)
			}
			held[i] = nil
			for j := range units {
				if alive[j] && len(held[j]) < per {
					take(j, 0)
				}
			}
		}
	}
	for i := range units {
		if !alive[i] {
			dropped = append(dropped, units[i])
			continue
		}
		u := units[i]
		nicsOf := slices.Clone(held[i])
		slices.SortStableFunc(nicsOf, func(a, b *NIC) int {
			return cmp.Or(cmp.Compare(nicAffinity(&u, b), nicAffinity(&u, a)), strings.Compare(a.PCIAddress, b.PCIAddress))
		})
		u.NICs = make([]NIC, len(nicsOf))
		for j, n := range nicsOf {
			u.NICs[j] = *n
		}
		kept = append(kept, u)
	}
	return kept, dropped
}

// unitID derives a unit's device-plugin ID from its hardware: see
// [Unit.ID].
func unitID(u *Unit) string {
	h := fnv.New32a()
	for _, g := range u.GPUs {
		h.Write([]byte(g.PCIAddress))
		h.Write([]byte{','})
	}
	h.Write([]byte{'|'})
	addrs := make([]string, len(u.NICs))
	for i, n := range u.NICs {
		addrs[i] = n.PCIAddress
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		h.Write([]byte(a))
		h.Write([]byte{','})
	}
	return fmt.Sprintf("%s-x%d-%08x", u.GPUs[0].PCIAddress, len(u.GPUs), h.Sum32())
}
