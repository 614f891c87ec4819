package dra

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// TypeNIC is the value of the attribute "type" of a NIC.
const TypeNIC = "nic"

// NIC is what the ResourceSlice says of one NIC.
type NIC struct {
	// Name is the device name, "cxi0".
	Name       string
	PCIAddress string
	// PCIeRoot is the root complex, "pci0000:20"; empty when unknown.
	PCIeRoot string
	NUMANode int // -1 when unknown
	NID      uint32
	// LinkSpeedMbps is the link speed; 0 when down or unknown.
	LinkSpeedMbps int
	// Cassini is the generation, "cassini1" or "cassini2".
	Cassini string
	// NetDev is the hsn netdev, "hsn0"; empty when none.
	NetDev string
	// Services is how many services the NIC can hold beside the default
	// one (its free RGIDs); TLEs its trigger list entries. 0: unknown.
	Services, TLEs int
	// Unhealthy, when not empty, says why the NIC is tainted.
	Unhealthy string
}

// TaintKey is the taint of an unhealthy NIC, under the driver's name.
func TaintKey(driver string) string { return driver + "/unhealthy" }

// taintValue makes a health reason a label value (63 characters of
// [A-Za-z0-9_.-], beginning and ending with an alphanumeric).
var notLabel = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func taintValue(reason string) string {
	v := notLabel.ReplaceAllString(reason, "-")
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "-_.")
}

// Devices are the node's NICs as its ResourceSlice lists them. Attributes
// without a domain belong to the driver's; the standard pcieRoot lets a
// claim put a NIC on the PCIe root of a GPU that the GPU vendor's DRA
// driver publishes (a matchAttribute constraint across drivers).
func Devices(driver string, nics []NIC) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(nics))
	for _, n := range nics {
		d := resourceapi.Device{
			Name: n.Name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":           {StringValue: ptr.To(TypeNIC)},
				"nid":            {IntValue: ptr.To(int64(n.NID))},
				"linkSpeed":      {IntValue: ptr.To(int64(n.LinkSpeedMbps))},
				"cassiniVersion": {StringValue: ptr.To(n.Cassini)},
				deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr.To(n.PCIAddress)},
			},
		}
		if n.NetDev != "" {
			d.Attributes["hsnNetdev"] = resourceapi.DeviceAttribute{StringValue: ptr.To(n.NetDev)}
		}
		addPlacement(d.Attributes, n.PCIeRoot, n.NUMANode)
		addCapacity(&d, n)
		if n.Unhealthy != "" {
			d.Taints = []resourceapi.DeviceTaint{{Key: TaintKey(driver), Value: taintValue(n.Unhealthy), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		out = append(out, d)
	}
	return out
}

// AwaitVNILease has each device carry the binding conditions of package
// draclaim: a pod allocated one is bound to the node only once the
// controller holds its claim's VNI for the node (a node whose agent could
// lease it), and goes back to the scheduler's queue when the controller
// says it cannot. Prepare then finds the lease held. A cluster without
// the DRADeviceBindingConditions gate drops the fields and binds at once.
func AwaitVNILease(devs []resourceapi.Device) {
	for i := range devs {
		devs[i].BindingConditions = []string{draclaim.ConditionVNILeased}
		devs[i].BindingFailureConditions = []string{draclaim.ConditionVNILeaseFailed}
	}
}

// addCapacity publishes what claims consume of the NIC. Where its free
// services are known, the NIC is shared (allowMultipleAllocations): each
// claim on it gets a service of its own, so the scheduler counts one of
// `services` per claim by default and refuses a claim beyond them; a claim
// asking for every service (capacity.requests) has the NIC to itself. TLEs
// are consumed only where a claim asks for them. A shared NIC also counts
// its LE and TLE pools: a service reserving LEs takes an LE pool of its
// own (15 of them), one reserving TLEs a TLE pool (3, the default
// service holding the fourth), which is what limits such services on a
// NIC; a claim whose services reserve them asks for one of each it needs
// (Prepare refuses one that does not, checkPools). A NIC whose services are
// unknown stays one claim's at a time. A cluster without the
// DRAConsumableCapacity gate drops the policy and the flag, and so serves
// each NIC to one claim at a time.
func addCapacity(d *resourceapi.Device, n NIC) {
	if n.Services <= 0 && n.TLEs <= 0 {
		return
	}
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	shared := n.Services > 0
	if shared {
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity[CapacityServices] = consumable(n.Services, 1, 1)
		d.Capacity[CapacityLEPools] = onePerClaim(cxi.NumLEPools - 1)
		d.Capacity[CapacityTLEPools] = onePerClaim(cxi.NumTLEPools - 1)
	}
	if n.TLEs > 0 {
		if shared {
			d.Capacity[CapacityTLEs] = consumable(n.TLEs, 0, 0)
		} else {
			d.Capacity[CapacityTLEs] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(n.TLEs), resource.DecimalSI)}
		}
	}
}

// Capacities of a NIC, as claims name them in capacity.requests.
const (
	CapacityServices resourceapi.QualifiedName = "services"
	CapacityTLEs     resourceapi.QualifiedName = "tles"
	CapacityLEPools  resourceapi.QualifiedName = "lePools"
	CapacityTLEPools resourceapi.QualifiedName = "tlePools"
)

// onePerClaim is a capacity of value pools, of which a claim consumes
// none unless it asks for one: a claim's service on the NIC takes at most
// one pool of a kind.
func onePerClaim(value int) resourceapi.DeviceCapacity {
	q := func(v int) *resource.Quantity { return resource.NewQuantity(int64(v), resource.DecimalSI) }
	return resourceapi.DeviceCapacity{
		Value: *q(value),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    q(0),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(0), Max: q(1), Step: q(1)},
		},
	}
}

// consumable is a capacity of value of which a claim consumes def unless
// it asks for more, from min to all of it, in whole units.
func consumable(value, def, min int) resourceapi.DeviceCapacity {
	q := func(v int) *resource.Quantity { return resource.NewQuantity(int64(v), resource.DecimalSI) }
	return resourceapi.DeviceCapacity{
		Value: *q(value),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    q(def),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(min), Max: q(value), Step: q(1)},
		},
	}
}

// addPlacement adds the standard attributes that let a claim put devices
// on one PCIe root or NUMA node.
func addPlacement(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, root string, numa int) {
	if root != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr.To(root)}
	}
	if numa >= 0 {
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(numa))}
	}
}

// checkDeviceName refuses names a ResourceSlice cannot carry (a DNS label).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func checkDeviceName(name string) error {
	if !dnsLabel.MatchString(name) {
		return fmt.Errorf("device name %q is not a DNS label", name)
	}
	return nil
}
