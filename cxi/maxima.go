package cxi

import (
	"fmt"
	"strings"

	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// WithDeviceMaxima sets the NIC's own resource maxima: the num_ptes ...
// num_les properties that [sysfs.Discover] reads into
// [sysfs.Properties].Max. The driver refuses with EINVAL a service whose
// maximum of any resource is above the NIC's (cass_svc.c,
// validate_descriptor), and a NIC may have less than the Cassini defaults
// [DefaultLimits] names. With the maxima known:
//
//   - the default limits become the NIC's maxima, still with no
//     reservation and no TLEs;
//   - a limit above the NIC's maximum, in a spec or set with
//     [WithDefaultLimits], is lowered to the maximum (and its reservation
//     with it), as Slurm does (MIN of the configured and the device
//     maximum), and a warning names the resource, once for each set of
//     limits. A limit that is the Cassini default of [DefaultLimits] (a
//     configuration that leaves the resource out, filled in from it)
//     stands for "the device's maximum" and is lowered without a warning.
//
// A maximum of 0 (unknown: the property could not be read) or above 16 bits
// leaves that resource's limit as it is.
func WithDeviceMaxima(m sysfs.ResourceMaxima) Option {
	return func(c *Client) {
		for t, v := range map[uapi.RsrcType]int{
			uapi.RsrcPTE: m.PTEs, uapi.RsrcTXQ: m.TXQs, uapi.RsrcTGQ: m.TGQs, uapi.RsrcEQ: m.EQs,
			uapi.RsrcCT: m.CTs, uapi.RsrcLE: m.LEs, uapi.RsrcTLE: m.TLEs, uapi.RsrcAC: m.ACs,
		} {
			if v > 0 && v <= 0xffff {
				c.maxima[t] = uint16(v)
			}
		}
	}
}

// applyMaxima fits the client's default limits to the NIC's maxima; it runs
// once, after the options.
func (c *Client) applyMaxima() {
	if !c.limitsSet {
		def := c.limits.byType()
		for t, m := range c.maxima {
			// TLEs keep no maximum: any TLE takes one of the NIC's four
			// pools (see DefaultLimits).
			if m != 0 && t != int(uapi.RsrcTLE) {
				def[t].Max = m
			}
		}
		return
	}
	c.limits = c.within(c.limits)
}

// within returns l lowered to the NIC's maxima, and logs a warning the
// first time a given l needed it.
func (c *Client) within(l Limits) Limits {
	var lowered []string
	out := l
	def := DefaultLimits()
	cassini := def.byType()
	for t, lim := range out.byType() {
		m := c.maxima[t]
		if m == 0 || lim.Max <= m {
			continue
		}
		if *lim != *cassini[t] {
			lowered = append(lowered, fmt.Sprintf("%s max %d to %d", uapi.RsrcType(t), lim.Max, m))
		}
		lim.Max, lim.Res = m, min(lim.Res, m)
	}
	if len(lowered) > 0 {
		if prev := c.warned.Swap(&l); prev == nil || *prev != l {
			c.log.Warn("service limits above the NIC's maxima (device/properties/num_*): lowered to them",
				"lowered", strings.Join(lowered, ", "))
		}
	}
	return out
}
