package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// copyRelease copies the checkpoint release 0.2.0 wrote (testdata, made
// by that release's own package: a snapshot and a journal with two saves)
// into a fresh directory and returns the snapshot's path.
func copyRelease(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"release-0.2.0.json", "release-0.2.0.json.journal"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "release-0.2.0.json")
}

// lastEntry is the data of the last line of the journal beside path.
func lastEntry(t *testing.T, path string) envelope {
	t.Helper()
	b, err := os.ReadFile(path + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	var env envelope
	if err := json.Unmarshal(lines[len(lines)-1], &env); err != nil {
		t.Fatal(err)
	}
	return env
}

// Both kinds of record of the last release's file become holders, each
// field where the engine reads it: a pod's member on each of its
// services, a claim's VNIs on its services.
func TestReleaseFilesBecomeHolders(t *testing.T) {
	st, err := Open(copyRelease(t), "node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := st.Snapshot().IDs()
	if want := []string{"claim:claim-u1", "claim:claim-u2", "ns/a-0", "ns/b"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("holders %v, want %v", ids, want)
	}
	a, _ := st.Get("ns/a-0")
	if a.Kind != KindPod || a.HSN == nil || a.HSN.MTU != 9000 || a.Options.ExtraVNIs[0].VNI != 900 || a.DeviceIDs["main@hpe.com/cxi"][1] != "cxi1-0" {
		t.Fatalf("pod a-0 = %+v", a)
	}
	for _, s := range a.Services {
		if s.Netns != 4026532000 || !reflect.DeepEqual(s.VNIs, []uint16{1024, 900}) {
			t.Fatalf("pod a-0's service %+v: want its pod's member and VNIs", s)
		}
	}
	c, _ := st.Get(ClaimID("claim-u1"))
	if c.Kind != KindClaim || c.BoundPod != "uid-p" || c.Config.EnvSuffix != "X" || !c.Prepared ||
		!reflect.DeepEqual(c.Services, []Service{{NIC: "cxi2", ID: 4, VNIs: []uint16{1025}, Netns: 4026532100}}) {
		t.Fatalf("claim c1 = %+v", c)
	}
	if u2, _ := st.Get(ClaimID("claim-u2")); !u2.Unpreparing || u2.Services[0].Netns != 0 {
		t.Fatalf("claim c2 = %+v", u2)
	}
}

// By default the store writes what the last release wrote, byte for
// byte, so that a rollback reads every record: version 3, pods and claims
// in their old shapes.
func TestDefaultFormatIsTheLastReleases(t *testing.T) {
	path := copyRelease(t)
	want := lastEntry(t, path)
	st, err := Open(path, "node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	got := lastEntry(t, path)
	if got.Version != 3 || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("written as version %d:\n%s\nthe last release wrote version %d:\n%s", got.Version, got.Data, want.Version, want.Data)
	}
}

// Version 4 is written only when asked; a store opened afterwards with
// the default writes version 3 again at once, losing nothing: the way
// back before a rollback.
func TestFormat4OnlyWhenAskedAndBack(t *testing.T) {
	path := copyRelease(t)
	st, err := Open(path, "node-1", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := st.Snapshot()
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	if env := lastEntry(t, path); env.Version != 4 {
		t.Fatalf("asked for version 4, wrote %d", env.Version)
	}
	back, err := Open(path, "node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	if err := json.Unmarshal([]byte(readFile(t, path)), &env); err != nil || env.Version != 3 {
		t.Fatalf("snapshot after opening with the default: version %d (%v), want 3", env.Version, err)
	}
	if got := back.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after version 4 and back:\n got %+v\nwant %+v", got, want)
	}
	if _, err := Open(path, "node-1", 5); err == nil {
		t.Fatal("a format this agent cannot write was accepted")
	}
}

// A pod's and a claim's hsn interfaces, several of each, survive either
// format: version 3 carries them beside the fields the last release
// reads.
func TestHSNLinksInEitherFormat(t *testing.T) {
	links := func(base string) []HSNLink {
		return []HSNLink{
			{Name: "hsn0", Parent: "hsn0", Mode: "macvlan", Address: netip.MustParsePrefix(base + ".1/16"), Owner: "x/hsn0", HardwareAddr: "02:00:00:00:00:01"},
			{Name: "hsn1", Parent: "hsn1", Mode: "macvlan", Address: netip.MustParsePrefix(base + ".2/16"), Owner: "x/hsn1"},
		}
	}
	for _, format := range []int{3, 4} {
		t.Run(fmt.Sprint(format), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			st, err := Open(path, "node-1", format)
			if err != nil {
				t.Fatal(err)
			}
			pod := Holder{Kind: KindPod, UID: "uid-a", Namespace: "ns", Name: "a", DeviceIDs: map[string][]string{}}
			pod.SetHSNLinks(links("10.150.0"))
			claim := Holder{Kind: KindClaim, UID: "claim-u", Namespace: "ns", Name: "c"}
			claim.SetHSNLinks(links("10.151.0"))
			for _, h := range []Holder{pod, claim} {
				if err := st.Put(h); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Save(); err != nil {
				t.Fatal(err)
			}
			back, err := Open(path, "node-1", format)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range []Holder{pod, claim} {
				got, _ := back.Get(h.ID())
				if !reflect.DeepEqual(got.HSNLinks(), h.HSNLinks()) {
					t.Errorf("%s's links read back as %+v, want %+v", h.String(), got.HSNLinks(), h.HSNLinks())
				}
			}
		})
	}
}
