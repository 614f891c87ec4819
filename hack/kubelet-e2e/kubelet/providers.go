package kubelet

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

// devicesProvider adapts the device manager to the PodResources server the
// way the kubelet's container manager does.
type devicesProvider struct{ k *Kubelet }

// UpdateAllocatedDevices frees the devices of pods no longer active, as
// the PodResources server asks before it answers; never while a pod
// becomes active (see Kubelet.activating).
func (d devicesProvider) UpdateAllocatedDevices(logger klog.Logger) {
	d.k.activating.RLock()
	defer d.k.activating.RUnlock()
	d.k.manager.UpdateAllocatedDevices(logger)
}

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return toContainerDevices(d.k.manager.GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return toContainerDevices(d.k.manager.GetAllocatableDevices(logger))
}

func toContainerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for resource, instances := range devs {
		for id, dev := range instances {
			cd := &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}}
			if topo := dev.GetTopology(); topo != nil {
				cd.Topology = &podresourcesapi.TopologyInfo{}
				for _, n := range topo.GetNodes() {
					cd.Topology.Nodes = append(cd.Topology.Nodes, &podresourcesapi.NUMANode{ID: n.GetID()})
				}
			}
			out = append(out, cd)
		}
	}
	return out
}

// The harness pins no CPUs or memory and has no DRA drivers.
type noCPUs struct{}

func (noCPUs) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (noCPUs) GetPodCPUs(string) []int64              { return nil }
func (noCPUs) GetAllocatableCPUs() []int64            { return nil }

type noMemory struct{}

func (noMemory) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (noMemory) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory {
	return nil
}

type noDRA struct{}

func (noDRA) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}
