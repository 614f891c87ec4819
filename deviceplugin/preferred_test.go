package deviceplugin

import (
	"fmt"
	"slices"
	"testing"
)

// twoByFour is a node with 8 devices, cxi0-3 on NUMA 0 and cxi4-7 on 1.
var twoByFour = map[string][]int64{
	"cxi0": {0}, "cxi1": {0}, "cxi2": {0}, "cxi3": {0},
	"cxi4": {1}, "cxi5": {1}, "cxi6": {1}, "cxi7": {1},
}

func ids(prefix string, nums ...int) []string {
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = fmt.Sprintf("%s%d", prefix, n)
	}
	return out
}

func TestPreferredAllocation(t *testing.T) {
	all := ids("cxi", 0, 1, 2, 3, 4, 5, 6, 7)
	for _, tc := range []struct {
		name  string
		avail []string
		must  []string
		size  int
		topo  map[string][]int64
		want  []string
	}{
		{name: "packs the first node", avail: all, size: 2, topo: twoByFour, want: ids("cxi", 0, 1)},
		{name: "whole node", avail: all, size: 4, topo: twoByFour, want: ids("cxi", 0, 1, 2, 3)},
		{name: "best fit keeps the fuller node whole",
			avail: ids("cxi", 0, 1, 2, 3, 6, 7), size: 2, topo: twoByFour, want: ids("cxi", 6, 7)},
		{name: "fits only on the fuller node",
			avail: ids("cxi", 0, 1, 2, 3, 6, 7), size: 3, topo: twoByFour, want: ids("cxi", 0, 1, 2)},
		{name: "must-include pulls its node",
			avail: all, must: ids("cxi", 5), size: 3, topo: twoByFour, want: ids("cxi", 4, 5, 6)},
		{name: "must-include on two nodes fills the one holding more",
			avail: all, must: ids("cxi", 0, 4, 5), size: 5, topo: twoByFour, want: ids("cxi", 0, 4, 5, 6, 7)},
		{name: "must-include node too small spills to best fit",
			avail: ids("cxi", 0, 4, 5, 6, 7), must: ids("cxi", 0), size: 3, topo: twoByFour, want: ids("cxi", 0, 4, 5)},
		{name: "spanning nodes takes the largest first",
			avail: ids("cxi", 0, 1, 4, 5, 6), size: 4, topo: twoByFour, want: ids("cxi", 0, 4, 5, 6)},
		{name: "everything", avail: all, size: 8, topo: twoByFour, want: all},
		{name: "must-include is the whole answer", avail: all, must: ids("cxi", 7, 3), size: 2, topo: twoByFour, want: ids("cxi", 3, 7)},
		{name: "must-include outside available is ignored",
			avail: ids("cxi", 4, 5, 6), must: ids("cxi", 0), size: 2, topo: twoByFour, want: ids("cxi", 4, 5)},
		{name: "no topology: natural order",
			avail: ids("cxi", 10, 2, 1), size: 2, topo: nil, want: ids("cxi", 1, 2)},
		{name: "no-affinity devices come last",
			avail: []string{"a", "b", "cxi4"}, size: 2, topo: twoByFour, want: []string{"a", "cxi4"}},
		{name: "single-node devices before shared ones",
			avail: []string{"x", "y", "z"}, size: 1,
			topo: map[string][]int64{"x": {0, 1}, "y": {1}, "z": {0}}, want: []string{"z"}},
		{name: "duplicates counted once",
			avail: ids("cxi", 0, 0, 0, 4), must: ids("cxi", 0, 0), size: 2, topo: twoByFour, want: ids("cxi", 0, 4)},
		{name: "size zero", avail: all, size: 0, topo: twoByFour, want: nil},
		{name: "negative size", avail: all, size: -3, topo: twoByFour, want: nil},
		{name: "size above available", avail: ids("cxi", 0, 0, 1), size: 3, topo: twoByFour, want: nil},
		{name: "more must-include than size", avail: all, must: ids("cxi", 0, 1, 2), size: 2, topo: twoByFour, want: nil},
		{name: "nothing available", avail: nil, size: 1, topo: twoByFour, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PreferredAllocation(tc.avail, tc.must, tc.size, tc.topo)
			if !slices.Equal(got, tc.want) {
				t.Errorf("PreferredAllocation(%v, must %v, %d) = %v, want %v", tc.avail, tc.must, tc.size, got, tc.want)
			}
			// Deterministic whatever the input order.
			rev := slices.Clone(tc.avail)
			slices.Reverse(rev)
			if again := PreferredAllocation(rev, tc.must, tc.size, tc.topo); !slices.Equal(again, got) {
				t.Errorf("reversed input gives %v, want %v", again, got)
			}
		})
	}
}

func TestNaturalCompare(t *testing.T) {
	sorted := []string{"", "0", "00", "1", "2", "10", "a", "cxi1", "cxi01", "cxi2", "cxi10", "cxi10a", "cxi10b", "cxi100", "hsn0", "hsn1", "hsn10"}
	// "cxi01" and "cxi1" are equal by value; byte order breaks the tie.
	sorted[7], sorted[8] = "cxi01", "cxi1"
	for i := range sorted {
		for j := range sorted {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := naturalCompare(sorted[i], sorted[j]); got != want {
				t.Errorf("naturalCompare(%q, %q) = %d, want %d", sorted[i], sorted[j], got, want)
			}
		}
	}
}

func TestDeviceSetDropsBadIDsAndCopies(t *testing.T) {
	long := string(make([]byte, maxDeviceIDLen+1))
	nodes := []int64{1, 0, 1}
	devs := []Device{{ID: "b", NUMANodes: nodes}, {ID: ""}, {ID: "a", Healthy: true}, {ID: "b"}, {ID: long}}
	set, dropped := newDeviceSet(devs, 7)
	if len(dropped) != 3 {
		t.Errorf("dropped %v, want 3 errors", dropped)
	}
	if got := []string{set.list[0].ID, set.list[1].ID}; len(set.list) != 2 || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("list = %+v", set.list)
	}
	nodes[0] = 9 // the caller's slice is not shared
	if got := set.topo["b"]; !slices.Equal(got, []int64{0, 1}) {
		t.Errorf("topo[b] = %v, want [0 1]", got)
	}
	if set.healthy != 1 || set.version != 7 {
		t.Errorf("healthy = %d, version = %d", set.healthy, set.version)
	}
	pd := set.pluginDevices()
	if pd[0].GetHealth() != "Healthy" || pd[0].GetTopology() != nil || pd[1].GetHealth() != "Unhealthy" || len(pd[1].GetTopology().GetNodes()) != 2 {
		t.Errorf("plugin devices = %v", pd)
	}
}
