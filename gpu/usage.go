package gpu

// Usage counts one machine type's units in the shape of the Imperator
// design's availableMachines[].usage.
//
// A node agent knows only its own node and which units the kubelet has
// allocated (from PodResources), so:
//
//   - Maximum is the number of units carved on this node, healthy or not
//     (in maintenance and not-ready none is allocatable, but they still
//     exist; the cluster sums Maximum over nodes).
//   - Used counts allocated units not held by reservation pods.
//   - Reserved counts allocated units held by Imperator's reservation pods
//     (pod-role=reservation). The agent cannot tell those from guests
//     unless it looks up the holding pod's labels (PodResources gives the
//     pod's name, the API server its labels); without that it passes no
//     reservations and Reserved is 0.
//   - Waiting counts guest pods not yet scheduled to any node, which no
//     node agent can see; only a cluster-wide controller can fill it. It
//     is always 0 here.
type Usage struct {
	Maximum  int `json:"maximum"`
	Reserved int `json:"reserved"`
	Used     int `json:"used"`
	Waiting  int `json:"waiting"`
}

// Usage counts the carving's units: allocated holds the unit IDs the
// kubelet has allocated, reserved those of them held by reservation pods
// (nil when unknown). IDs that are not units of this carving are ignored.
func (c *Carving) Usage(allocated, reserved map[string]bool) Usage {
	u := Usage{Maximum: len(c.Units)}
	for _, unit := range c.Units {
		switch {
		case !allocated[unit.ID]:
		case reserved[unit.ID]:
			u.Reserved++
		default:
			u.Used++
		}
	}
	return u
}

// Free returns the units neither used nor reserved.
func (u Usage) Free() int { return u.Maximum - u.Used - u.Reserved }
