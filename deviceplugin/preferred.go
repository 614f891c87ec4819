package deviceplugin

import (
	"cmp"
	"slices"
)

// PreferredAllocation picks size device IDs out of available for one
// container, keeping them on as few NUMA nodes as it can. topo maps a
// device ID to the NUMA nodes it is local to; IDs missing from topo, or
// mapped to no node, have no affinity and are taken last.
//
// The policy, in order:
//  1. every ID of mustInclude that is in available is taken;
//  2. NUMA nodes that already hold a taken device come first, because
//     taking more from them spreads the allocation no further;
//  3. among the nodes considered, one that fits the whole remainder wins,
//     and of those the one with the fewest free devices (best fit), so that
//     nodes with many free devices stay whole for larger requests later;
//  4. when no node fits, the node with the most free devices is emptied
//     first and the loop repeats, so the allocation spans the fewest nodes;
//  5. ties go to the lowest node number, and inside a node devices local to
//     that node alone come before devices shared between nodes, then by ID
//     in natural order ("cxi2" before "cxi10").
//
// The result is sorted in natural order. It is nil when the request cannot
// be met: size below 1, size above the number of distinct available IDs,
// or more must-include IDs than size. Duplicate IDs in the inputs are
// counted once. The result never holds an ID that is not in available.
// PreferredAllocation is pure and safe for concurrent use.
func PreferredAllocation(available, mustInclude []string, size int, topo map[string][]int64) []string {
	if size < 1 {
		return nil
	}
	avail := slices.Clone(available)
	slices.SortFunc(avail, naturalCompare)
	avail = slices.Compact(avail)
	if size > len(avail) {
		return nil
	}

	taken := make(map[string]bool, size)
	result := make([]string, 0, size)
	for _, id := range mustInclude {
		if taken[id] {
			continue
		}
		if _, ok := slices.BinarySearchFunc(avail, id, naturalCompare); !ok {
			continue
		}
		taken[id] = true
		result = append(result, id)
	}
	if len(result) > size {
		return nil
	}

	// used holds the NUMA nodes the allocation already touches.
	used := make(map[int64]bool)
	for _, id := range result {
		for _, n := range topo[id] {
			used[n] = true
		}
	}

	// free lists the untaken devices local to each node; noAffinity the
	// untaken devices local to none.
	free := make(map[int64][]string)
	var noAffinity []string
	for _, id := range avail {
		if taken[id] {
			continue
		}
		nodes := topo[id]
		if len(nodes) == 0 {
			noAffinity = append(noAffinity, id)
			continue
		}
		for _, n := range nodes {
			if !slices.Contains(free[n], id) {
				free[n] = append(free[n], id)
			}
		}
	}
	for n := range free {
		slices.SortStableFunc(free[n], func(a, b string) int {
			// Devices of this node alone first; avail order otherwise.
			return cmp.Compare(len(distinct(topo[a])), len(distinct(topo[b])))
		})
	}

	take := func(id string) {
		taken[id] = true
		result = append(result, id)
		for _, n := range topo[id] {
			used[n] = true
		}
	}
	for len(result) < size {
		node, ok := pickNode(free, used, size-len(result), taken)
		if !ok {
			break
		}
		for _, id := range free[node] {
			if len(result) == size {
				break
			}
			if !taken[id] {
				take(id)
			}
		}
		delete(free, node)
	}
	for _, id := range noAffinity {
		if len(result) == size {
			break
		}
		take(id)
	}

	slices.SortFunc(result, naturalCompare)
	return result
}

// pickNode chooses the NUMA node to take devices from next, following the
// rules of PreferredAllocation. It reports false when no node has an
// untaken device left.
func pickNode(free map[int64][]string, used map[int64]bool, remaining int, taken map[string]bool) (int64, bool) {
	type candidate struct {
		node  int64
		count int
		used  bool
	}
	var cands []candidate
	for n, ids := range free {
		count := 0
		for _, id := range ids {
			if !taken[id] {
				count++
			}
		}
		if count > 0 {
			cands = append(cands, candidate{node: n, count: count, used: used[n]})
		}
	}
	if len(cands) == 0 {
		return 0, false
	}
	if slices.ContainsFunc(cands, func(c candidate) bool { return c.used }) {
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return !c.used })
	}
	best := slices.MinFunc(cands, func(a, b candidate) int {
		aFits, bFits := a.count >= remaining, b.count >= remaining
		switch {
		case aFits && !bFits:
			return -1
		case bFits && !aFits:
			return 1
		case aFits && bFits:
			if c := cmp.Compare(a.count, b.count); c != 0 {
				return c // best fit: fewest free devices
			}
		default:
			if c := cmp.Compare(b.count, a.count); c != 0 {
				return c // most free devices first
			}
		}
		return cmp.Compare(a.node, b.node)
	})
	return best.node, true
}

// distinct returns nodes without repeats (topo lists may repeat a node).
func distinct(nodes []int64) []int64 {
	if len(nodes) < 2 {
		return nodes
	}
	out := slices.Clone(nodes)
	slices.Sort(out)
	return slices.Compact(out)
}

// naturalCompare orders strings so that runs of digits compare by value:
// "cxi2" < "cxi10". Strings that differ only in leading zeros fall back to
// plain byte order, so the order is total.
func naturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if isDigit(ca) && isDigit(cb) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			na, nb := trimZeros(a[si:i]), trimZeros(b[sj:j])
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := cmp.Compare(na, nb); c != 0 {
				return c
			}
			continue
		}
		if ca != cb {
			return cmp.Compare(ca, cb)
		}
		i++
		j++
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
