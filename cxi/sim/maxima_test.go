package sim

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func TestMaxFromSysfs(t *testing.T) {
	for _, c := range []struct {
		name string
		in   sysfs.ResourceMaxima
		want [uapi.NumRsrcTypes]uint16
	}{
		{"the driver's defaults", sysfs.ResourceMaxima{PTEs: 2048, TXQs: 1024, TGQs: 512, EQs: 2047, CTs: 2047,
			ACs: 1022, TLEs: 2048, LEs: 16384}, DefaultMax()},
		{"lower LEs and TLEs", sysfs.ResourceMaxima{LEs: 8192, TLEs: 1024},
			[uapi.NumRsrcTypes]uint16{uapi.RsrcLE: 8192, uapi.RsrcTLE: 1024}},
		{"unread or out of range is left to DefaultMax", sysfs.ResourceMaxima{PTEs: -1, LEs: 70000, ACs: 65535},
			[uapi.NumRsrcTypes]uint16{uapi.RsrcAC: 65535}},
	} {
		if got := MaxFromSysfs(c.in); got != c.want {
			t.Errorf("%s: MaxFromSysfs(%+v) = %v, want %v", c.name, c.in, got, c.want)
		}
	}
}
