package netns

import (
	"errors"
	"testing"
)

func TestParseSandboxInfo(t *testing.T) {
	tests := []struct {
		name    string
		info    string
		want    SandboxInfo
		wantErr bool
	}{
		{"containerd 2.x", containerdInfo(t, 4711, containerdNetns, false, true)["info"],
			SandboxInfo{Pid: 4711, NetnsPath: containerdNetns}, false},
		{"containerd 1.7", containerdInfo(t, 4711, containerdNetns, false, false)["info"],
			SandboxInfo{Pid: 4711, NetnsPath: containerdNetns}, false},
		{"containerd, host network", containerdInfo(t, 4711, "", false, true)["info"],
			SandboxInfo{Pid: 4711, HostNetwork: true}, false},
		{"containerd, closed", containerdInfo(t, 4711, containerdNetns, true, true)["info"],
			SandboxInfo{Pid: 4711, NetnsPath: containerdNetns, NetnsClosed: true}, false},
		{"CRI-O with infra", crioInfo(t, 4711, crioNetns, false)["info"],
			SandboxInfo{Pid: 4711, NetnsPath: crioNetns}, false},
		{"CRI-O spoofed", crioInfo(t, 0, crioNetns, true)["info"],
			SandboxInfo{NetnsPath: crioNetns}, false},
		{"containerd deleted sandbox: no spec, metadata only",
			`{"pid":0,"processStatus":"deleted","netNamespaceClosed":false,"sandboxMetadata":{"Version":"v1","Metadata":{"ID":"x","NetNSPath":"/var/run/netns/cni-1"}}}`,
			SandboxInfo{NetnsPath: "/var/run/netns/cni-1"}, false},
		{"spec without namespaces says nothing", `{"pid":7,"runtimeSpec":{"linux":{}}}`, SandboxInfo{Pid: 7}, false},
		{"empty object", `{}`, SandboxInfo{}, false},
		{"malformed", `{"pid":`, SandboxInfo{}, true},
		{"not an object", `[1,2]`, SandboxInfo{}, true},
		{"negative pid", `{"pid":-1}`, SandboxInfo{}, true},
		{"huge pid", `{"pid":4194304}`, SandboxInfo{}, true},
		{"fractional pid", `{"pid":1.5}`, SandboxInfo{}, true},
		{"relative path", `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"netns/x"}]}}}`, SandboxInfo{}, true},
		{"unclean path", `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/var/run/../etc/x"}]}}}`, SandboxInfo{}, true},
		{"NUL in path", `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/var/run/netns/a\u0000b"}]}}}`, SandboxInfo{}, true},
		{"two network namespaces", `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/a"},{"type":"network","path":"/b"}]}}}`, SandboxInfo{}, true},
		{"namespaces of the wrong type", `{"runtimeSpec":{"linux":{"namespaces":{"type":"network"}}}}`, SandboxInfo{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSandboxInfo(tt.info)
			if tt.wantErr {
				if !errors.Is(err, ErrBadInfo) {
					t.Fatalf("ParseSandboxInfo = %+v, %v; want ErrBadInfo", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSandboxInfo = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func FuzzParseSandboxInfo(f *testing.F) {
	f.Add(containerdInfo(f, 4711, containerdNetns, false, true)["info"])
	f.Add(containerdInfo(f, 4711, "", true, false)["info"])
	f.Add(crioInfo(f, 4711, crioNetns, false)["info"])
	f.Add(crioInfo(f, 0, crioNetns, true)["info"])
	f.Add(`{"pid":1,"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/x"},{"type":"network"}]}}}`)
	f.Add(`{"sandboxMetadata":{"Metadata":{"NetNSPath":"rel"}}}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		info, err := ParseSandboxInfo(s)
		if err != nil {
			if !errors.Is(err, ErrBadInfo) {
				t.Fatalf("error %v does not wrap ErrBadInfo", err)
			}
			return
		}
		if info.Pid < 0 || info.Pid >= maxPid {
			t.Fatalf("pid %d accepted", info.Pid)
		}
		if p := info.NetnsPath; p != "" && (p[0] != '/' || info.HostNetwork) {
			t.Fatalf("path %q accepted (host network %v)", p, info.HostNetwork)
		}
	})
}
