package sim

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func sampleState(t testing.TB) *state {
	t.Helper()
	st, errno := newState(Options{})
	if errno != 0 {
		t.Fatal(errno)
	}
	d := podDesc(1024, 1025)
	d.Limits[uapi.RsrcTLE] = uapi.Limits{Max: 8, Res: 8}
	d.Limits[uapi.RsrcLE] = uapi.Limits{Max: 100, Res: 10}
	d.Members[1] = uapi.SvcMember{Type: uapi.MemberGID, ID: 7}
	if _, _, errno := st.alloc(d, `user "quoted"`); errno != 0 {
		t.Fatal(errno)
	}
	n := podDesc(2000)
	n.Members[0] = uapi.SvcMember{}
	id, _, errno := st.alloc(n, "user")
	if errno != 0 {
		t.Fatal(errno)
	}
	st.find(id).ACL.NetNS = []uint32{4026532000, 4026532001}
	st.find(id).LNIs = 2
	r := podDesc()
	r.RestrictedVNIs = false
	if id, _, errno = st.alloc(r, "user"); errno != 0 {
		t.Fatal(errno)
	}
	if _, errno := st.setVNIRange(id, 64, 127); errno != 0 {
		t.Fatal(errno)
	}
	return st
}

func TestStateCodecRoundTrip(t *testing.T) {
	st := sampleState(t)
	data, err := encodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	var back state
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	if !reflect.DeepEqual(&back, st) {
		t.Fatalf("round trip changed the state:\n%+v\n%+v", back, *st)
	}
	// The hand-written encoder agrees with encoding/json's view of it.
	viaReflect, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back2 state
	if err := json.Unmarshal(viaReflect, &back2); err != nil || !reflect.DeepEqual(&back2, st) {
		t.Fatalf("json.Marshal round trip: %v", err)
	}
	c := st.clone()
	quoted := slices.IndexFunc(st.Services, func(s *service) bool { return s.Name == `user "quoted"` })
	ranged := len(st.Services) - 1
	c.Services[quoted].ACL.GIDs[0] = 99
	c.Services[quoted].Rsrc[uapi.RsrcLE].Res = 1
	c.Services[ranged].Range.Ignore = 0
	if st.Services[quoted].ACL.GIDs[0] != 7 || st.Services[quoted].Rsrc[uapi.RsrcLE].Res != 10 ||
		st.Services[ranged].Range.Ignore != 63 {
		t.Fatal("clone shares memory with the original")
	}
}

// FuzzStateFile feeds arbitrary bytes to the state-file decoder: it must
// reject or accept them without panicking, and what it accepts must
// survive a re-encode.
func FuzzStateFile(f *testing.F) {
	data, err := encodeState(sampleState(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"version":1,"services":[{"desc":"00","name":"x"}]}`))
	f.Add([]byte(`{"version":1,"services":[{"desc":"` + string(make([]byte, 0)) + `","rsrc":[[9,1,1]]}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := append([]byte(nil), data...)
		d := &Device{name: "cxi0", mem: &mem}
		st, _, err := d.load(false)
		if err != nil {
			return
		}
		out, err := encodeState(st)
		if err != nil {
			// Only a descriptor the wire format cannot hold fails, and
			// the decoder never produces one.
			t.Fatalf("re-encode of a decoded state: %v", err)
		}
		var again state
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(&again, st) {
			t.Fatalf("round trip changed the state:\n%+v\n%+v", again, *st)
		}
	})
}
