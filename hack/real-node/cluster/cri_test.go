package cluster

import (
	"slices"
	"strings"
	"testing"
)

// containerd's verbose info of a container (ContainerStatus, "info"), cut
// down: the CRI configuration the kubelet sent and the OCI spec.
const criInfo = `{"sandboxID":"abc","pid":42,
 "config":{"metadata":{"name":"main"},"envs":[{"key":"SLINGSHOT_DEVICES","value":"cxi0"},{"key":"SLINGSHOT_TCS","value":"0xa"}],
  %s
  "annotations":{"io.kubernetes.container.hash":"1"%s}},
 "runtimeSpec":{"process":{"env":["PATH=/bin","SLINGSHOT_DEVICES=cxi0","SLINGSHOT_VNIS=1024","SLINGSHOT_SVC_IDS=3"]}}}`

func TestParseRuntimeInfo(t *testing.T) {
	info := func(cdi, annotation string) string {
		return strings.Replace(strings.Replace(criInfo, "%s", cdi, 1), "%s", annotation, 1)
	}
	c, err := parseRuntimeInfo("abc", info(`"CDI_devices":[],`, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.CDI) != 0 || !slices.Equal(c.KubeletEnv, []string{"SLINGSHOT_DEVICES", "SLINGSHOT_TCS"}) || !slices.Contains(c.Env, "SLINGSHOT_SVC_IDS=3") {
		t.Fatalf("parsed %+v", c)
	}
	for _, tc := range []struct{ cdi, annotation, want string }{
		{`"CDI_devices":[{"name":"hpe.com/cxi=abc"}],`, "", "CDI_devices"},
		{`"cdi_devices":[{"name":"hpe.com/cxi=abc"}],`, "", "cdi_devices"},
		{"", `,"cdi.k8s.io/devicemanager_x":"hpe.com/cxi=abc"`, "annotation cdi.k8s.io/"},
	} {
		c, err := parseRuntimeInfo("abc", info(tc.cdi, tc.annotation))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.CDI) != 1 || !strings.HasPrefix(c.CDI[0], tc.want) {
			t.Errorf("CDI %v, want one %s", c.CDI, tc.want)
		}
	}
	if _, err := parseRuntimeInfo("abc", `{"pid":42}`); err == nil {
		t.Error("an info without a configuration parsed")
	}
}
