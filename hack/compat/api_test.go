package compat

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// What the agent and the controller exchange: the gRPC API
// (controller/api/v1), its errors, and the agent's user agent. The
// version-skew policy (docs/upgrade.md) has a controller serve agents of
// its release and the one before, and the API change only additively.

// message and decodedMessage are the peer's Message and DecodedMessage.
type message struct {
	Type string          `json:"type"`
	Data []byte          `json:"data"`
	JSON json.RawMessage `json:"json"`
}

type decodedMessage struct {
	JSON    json.RawMessage `json:"json"`
	Unknown bool            `json:"unknown"`
	Err     string          `json:"err"`
}

const (
	leaseType     = "slingshot.controller.v1.JobVNILease"
	fromNodeSlice = leaseType + ".from_node_slice"
)

// apiFile is a peer's controller.proto.
func apiFile(t *testing.T, name string, info peerInfo) protoreflect.FileDescriptor {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(info.ProtoFile, fdp); err != nil {
		t.Fatalf("%s's API descriptor: %v", name, err)
	}
	// The API imports nothing today; an import it gains is not what this
	// test compares.
	fd, err := protodesc.FileOptions{AllowUnresolvable: true}.New(fdp, new(protoregistry.Files))
	if err != nil {
		t.Fatalf("%s's API descriptor: %v", name, err)
	}
	return fd
}

// messagesOf returns every message of fd, nested ones too, by full name.
func messagesOf(fd protoreflect.FileDescriptor) map[protoreflect.FullName]protoreflect.MessageDescriptor {
	out := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			out[ms.Get(i).FullName()] = ms.Get(i)
			walk(ms.Get(i).Messages())
		}
	}
	walk(fd.Messages())
	return out
}

func enumsOf(fd protoreflect.FileDescriptor) map[protoreflect.FullName]protoreflect.EnumDescriptor {
	out := map[protoreflect.FullName]protoreflect.EnumDescriptor{}
	add := func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			out[es.Get(i).FullName()] = es.Get(i)
		}
	}
	add(fd.Enums())
	for _, m := range messagesOf(fd) {
		add(m.Enums())
	}
	return out
}

// HEAD's API is the baseline's plus additions: every message, field,
// enum value, service and method of the baseline is in HEAD with the same
// number, name, type, cardinality and presence.
func TestAPIIsAdditive(t *testing.T) {
	w := setup(t)
	oldFD, newFD := apiFile(t, "the baseline", w.oldInfo), apiFile(t, "HEAD", w.newInfo)
	if oldFD.Package() != newFD.Package() {
		failf(t, "the API's package is %s, the baseline's %s", newFD.Package(), oldFD.Package())
	}
	newMsgs := messagesOf(newFD)
	for name, om := range messagesOf(oldFD) {
		nm := newMsgs[name]
		if nm == nil {
			failf(t, "message %s of the baseline is gone", name)
			continue
		}
		for i := range om.Fields().Len() {
			of := om.Fields().Get(i)
			nf := nm.Fields().ByNumber(of.Number())
			if nf == nil {
				failf(t, "field %s (%d) of the baseline is gone", of.FullName(), of.Number())
				continue
			}
			if got, want := fieldShape(nf), fieldShape(of); got != want {
				failf(t, "field %d of %s changed: HEAD %s, the baseline %s", of.Number(), name, got, want)
			}
		}
	}
	newEnums := enumsOf(newFD)
	for name, oe := range enumsOf(oldFD) {
		ne := newEnums[name]
		if ne == nil {
			failf(t, "enum %s of the baseline is gone", name)
			continue
		}
		for i := range oe.Values().Len() {
			ov := oe.Values().Get(i)
			if nv := ne.Values().ByNumber(ov.Number()); nv == nil || nv.Name() != ov.Name() {
				failf(t, "enum %s: the baseline's value %s = %d is not in HEAD", name, ov.Name(), ov.Number())
			}
		}
	}
	for i := range oldFD.Services().Len() {
		os := oldFD.Services().Get(i)
		ns := newFD.Services().ByName(os.Name())
		if ns == nil {
			failf(t, "service %s of the baseline is gone", os.FullName())
			continue
		}
		for j := range os.Methods().Len() {
			om := os.Methods().Get(j)
			nm := ns.Methods().ByName(om.Name())
			if nm == nil {
				failf(t, "method %s of the baseline is gone: its agents call it", om.FullName())
				continue
			}
			if got, want := methodShape(nm), methodShape(om); got != want {
				failf(t, "method %s changed: HEAD %s, the baseline %s", om.FullName(), got, want)
			}
		}
	}
}

func fieldShape(f protoreflect.FieldDescriptor) string {
	typ := f.Kind().String()
	switch {
	case f.IsMap():
		typ = fmt.Sprintf("map<%s, %s>", fieldShape(f.MapKey()), fieldShape(f.MapValue()))
	case f.Message() != nil:
		typ = string(f.Message().FullName())
	case f.Enum() != nil:
		typ = string(f.Enum().FullName())
	}
	oneof := ""
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		oneof = " in oneof " + string(o.Name())
	}
	return fmt.Sprintf("%s %s %s (presence %v)%s", f.Cardinality(), typ, f.Name(), f.HasPresence(), oneof)
}

func methodShape(m protoreflect.MethodDescriptor) string {
	return fmt.Sprintf("(%s, stream %v) returns (%s, stream %v)", m.Input().FullName(), m.IsStreamingClient(), m.Output().FullName(), m.IsStreamingServer())
}

// Every message of the baseline's API, random, as the baseline encodes
// it, is read by HEAD to the same values, with no field it does not know.
func TestBaselineMessagesReadByHEAD(t *testing.T) {
	w := setup(t)
	var msgs []message
	if err := w.old.call("proto.gen", map[string]any{"seed": seed(), "count": *messagesFlag}, &msgs); err != nil {
		t.Fatal(err)
	}
	checkTypesCovered(t, msgs, apiFile(t, "the baseline", w.oldInfo))
	var got []decodedMessage
	if err := w.new.call("proto.decode", map[string]any{"messages": msgs}, &got); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		d := got[i]
		switch {
		case d.Err != "":
			failf(t, "%s %s: HEAD cannot read it: %s", m.Type, m.JSON, d.Err)
		case d.Unknown:
			failf(t, "%s %s: HEAD does not know a field the baseline sent: %s", m.Type, m.JSON, d.JSON)
		default:
			if diff := cmp.Diff(decodeJSON(m.JSON), decodeJSON(d.JSON)); diff != "" {
				failf(t, "%s: HEAD read other values (-sent +read):\n%s", m.Type, diff)
			}
		}
	}
}

// Every message of HEAD's API that the baseline has, random, with HEAD's
// new fields too, as HEAD encodes it, is read by the baseline: its new
// fields ignored, the others to the same values.
func TestHEADMessagesReadByBaseline(t *testing.T) {
	w := setup(t)
	oldFD, newFD := apiFile(t, "the baseline", w.oldInfo), apiFile(t, "HEAD", w.newInfo)
	oldMsgs, newMsgs := messagesOf(oldFD), messagesOf(newFD)
	var all []message
	if err := w.new.call("proto.gen", map[string]any{"seed": seed() + 1, "count": *messagesFlag}, &all); err != nil {
		t.Fatal(err)
	}
	checkTypesCovered(t, all, newFD)
	// A message the baseline lacks belongs to a method it does not serve
	// or a field it does not know: it never receives one alone.
	msgs := slices.DeleteFunc(all, func(m message) bool { return oldMsgs[protoreflect.FullName(m.Type)] == nil })
	var got []decodedMessage
	if err := w.old.call("proto.decode", map[string]any{"messages": msgs}, &got); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		d := got[i]
		if d.Err != "" {
			failf(t, "%s %s: the baseline cannot read it: %s", m.Type, m.JSON, d.Err)
			continue
		}
		name := protoreflect.FullName(m.Type)
		want := restrict(decodeJSON(m.JSON), newMsgs[name], oldMsgs[name])
		if diff := cmp.Diff(want, decodeJSON(d.JSON)); diff != "" {
			failf(t, "%s: the baseline read other values (-sent, less HEAD's new fields; +read):\n%s", m.Type, diff)
		}
	}
}

// checkTypesCovered fails unless msgs hold a message of every type of fd
// with a field set.
func checkTypesCovered(t *testing.T, msgs []message, fd protoreflect.FileDescriptor) {
	t.Helper()
	set := map[string]bool{}
	for _, m := range msgs {
		if len(m.Data) > 0 {
			set[m.Type] = true
		}
	}
	for name, md := range messagesOf(fd) {
		if md.Fields().Len() > 0 && !set[string(name)] {
			failf(t, "no message %s with a field set was made", name)
		}
	}
}

// restrict drops from v, a message of type nmd in protojson, the fields
// that omd, the same message in the other release, does not have.
func restrict(v any, nmd, omd protoreflect.MessageDescriptor) any {
	obj, ok := v.(map[string]any)
	if !ok || nmd == nil || omd == nil {
		return v
	}
	out := map[string]any{}
	for k, e := range obj {
		nf := nmd.Fields().ByName(protoreflect.Name(k))
		if nf == nil {
			out[k] = e // not a field name: let the comparison show it
			continue
		}
		of := omd.Fields().ByNumber(nf.Number())
		if of == nil {
			continue
		}
		switch {
		case nf.IsMap() && nf.MapValue().Message() != nil && of.IsMap() && of.MapValue().Message() != nil:
			m, _ := e.(map[string]any)
			r := map[string]any{}
			for mk, mv := range m {
				r[mk] = restrict(mv, nf.MapValue().Message(), of.MapValue().Message())
			}
			out[k] = r
		case nf.IsList() && nf.Message() != nil && of.Message() != nil:
			l, _ := e.([]any)
			r := make([]any, len(l))
			for i, le := range l {
				r[i] = restrict(le, nf.Message(), of.Message())
			}
			out[k] = r
		case nf.Message() != nil && of.Message() != nil:
			out[k] = restrict(e, nf.Message(), of.Message())
		default:
			out[k] = e
		}
	}
	return out
}

// clientResult is the peer's answer to client.read.
type clientResult struct {
	Leases []struct {
		Lease       json.RawMessage `json:"lease"`
		Err         string          `json:"err"`
		Unsupported bool            `json:"unsupported"`
		Released    []string        `json:"released"`
	} `json:"leases"`
	Errors []clientError `json:"errors"`
}

type clientError struct {
	Err         string            `json:"err"`
	Unsupported bool              `json:"unsupported"`
	Code        string            `json:"code"`
	Reason      string            `json:"reason"`
	Metadata    map[string]string `json:"metadata"`
	Sentinels   []string          `json:"sentinels"`
	SliceTaken  map[string]any    `json:"sliceTaken"`
}

type ctlError struct {
	Kind   string `json:"kind"`
	Status []byte `json:"status"`
}

// Lease fields whose values an agent may not know: the scope (a later
// release may add one) and the VNI (16 bits, in a 32-bit field).
const (
	leaseScope = leaseType + ".scope"
	leaseVNI   = leaseType + ".vni"
)

// knownLeases and unknownLeases are the scopes and VNIs of the leases
// the test hands between the releases: leases the agent knows (every
// scope the baseline declares, VNIs up to 65535), and leases of what it
// does not (no scope, scopes no release declares, VNIs beyond 16 bits).
func knownLeases(rng *rand.Rand) map[string][]int64 {
	vnis := []int64{0, 1, 1024, math.MaxUint16}
	for range 16 {
		vnis = append(vnis, rng.Int64N(math.MaxUint16+1))
	}
	return map[string][]int64{leaseScope: {1, 2, 3, 4}, leaseVNI: vnis}
}

func unknownLeases(rng *rand.Rand) []map[string][]int64 {
	vnis := []int64{math.MaxUint16 + 1, math.MaxUint32}
	for range 8 {
		vnis = append(vnis, math.MaxUint16+1+rng.Int64N(math.MaxUint32-math.MaxUint16))
	}
	return []map[string][]int64{
		{leaseScope: {0, 5, 6, 100, math.MaxInt32}, leaseVNI: knownLeases(rng)[leaseVNI]},
		{leaseScope: {1, 2, 3, 4}, leaseVNI: vnis},
	}
}

// An agent makes of a controller's answer what the agent of the
// controller's own release makes of it, both ways: a lease (its VNI,
// scope, key, network request, collectives), and every kind of error the
// controller returns (its code, reason and details, and the errors the
// agent acts on: unavailable, exhausted, owner gone, slice taken, ...).
//
// A lease of what the agent does not know (a scope no release declares,
// a VNI beyond 16 bits: what a later release might send) HEAD's agent
// refuses, naming its release and the controller's (unknown where the
// controller's release sends none), and gives the lease back; it never
// reads it as something else. The baseline's agent, 0.2.0, predates the
// refusal and misreads them (an unknown scope as none, the VNI cut to 16
// bits): its reading of them is not compared (docs/upgrade.md).
//
// So for a call the controller does not serve (a method a later release
// adds, called by its agent): HEAD's controller refuses it naming the
// method and both releases (0.2.0's answers as gRPC does), and HEAD's
// agent reads either answer as a refusal naming both releases.
func TestAgentReadsControllerAnswers(t *testing.T) {
	w := setup(t)
	leaseSchema := newSchema(w.oldInfo.LeaseSchema)
	common := map[string]bool{}
	for _, s := range w.oldInfo.Sentinels {
		if slices.Contains(w.newInfo.Sentinels, s) {
			common[s] = true
		}
	}
	infoOf := map[*peer]peerInfo{w.old: w.oldInfo, w.new: w.newInfo}
	for _, pair := range []struct{ ctl, agent *peer }{{w.old, w.new}, {w.new, w.old}} {
		t.Run(pair.ctl.name+" controller, "+pair.agent.name+" agent", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed(), 2))
			gen := func(values map[string][]int64, n uint64) []message {
				var msgs []message
				// A lease from the node's own slice sends the client to the
				// node's pool, which is not the answer's meaning.
				if err := pair.ctl.call("proto.gen", map[string]any{"seed": seed() + n, "count": *messagesFlag,
					"types": []string{leaseType}, "exclude": []string{fromNodeSlice}, "values": values}, &msgs); err != nil {
					t.Fatal(err)
				}
				return msgs[1:] // the first is empty: a lease of no scope
			}
			leases := gen(knownLeases(rng), 2)
			known := len(leases)
			for i, values := range unknownLeases(rng) {
				leases = append(leases, gen(values, 10+uint64(i))...)
			}
			var errs []ctlError
			if err := pair.ctl.call("ctl.errors", map[string]any{"seed": seed() + 3, "count": 3,
				"agentUserAgent": infoOf[pair.agent].UserAgent}, &errs); err != nil {
				t.Fatal(err)
			}
			ctlInfo := infoOf[pair.ctl]
			args := map[string]any{"leases": dataOf(leases), "statuses": statusesOf(errs),
				"controllerHeader": ctlInfo.ControllerHeader, "controllerVersion": ctlInfo.Version}
			var got, want clientResult
			if err := pair.agent.call("client.read", args, &got); err != nil {
				t.Fatal(err)
			}
			if err := pair.ctl.call("client.read", args, &want); err != nil {
				t.Fatal(err)
			}
			if len(got.Leases) != len(leases) || len(want.Leases) != len(leases) || len(got.Errors) != len(errs) || len(want.Errors) != len(errs) {
				t.Fatalf("answers: %d and %d leases of %d, %d and %d errors of %d", len(got.Leases), len(want.Leases), len(leases), len(got.Errors), len(want.Errors), len(errs))
			}
			ctlVersion := "unknown"
			if ctlInfo.ControllerHeader != "" {
				ctlVersion = ctlInfo.Version
			}
			for i, l := range leases[:known] {
				g, wa := got.Leases[i], want.Leases[i]
				if g.Err != "" || wa.Err != "" {
					failf(t, "lease %s: the %s agent: %s (error %q); the %s agent: %s (error %q)", l.JSON, pair.agent.name, g.Lease, g.Err, pair.ctl.name, wa.Lease, wa.Err)
					continue
				}
				if diff := cmp.Diff(leaseSchema.norm(decodeJSON(wa.Lease), ""), leaseSchema.norm(decodeJSON(g.Lease), "")); diff != "" {
					failf(t, "lease %s: the %s agent read it otherwise than the %s agent (-%s +%s):\n%s", l.JSON, pair.agent.name, pair.ctl.name, pair.ctl.name, pair.agent.name, diff)
				}
				if len(g.Released)+len(wa.Released) > 0 {
					failf(t, "lease %s: read, and released %q and %q", l.JSON, g.Released, wa.Released)
				}
			}
			for i, l := range leases[known:] {
				r := got.Leases[known+i]
				if pair.agent == w.old {
					r = want.Leases[known+i]
				}
				// HEAD's agent (the one that reads the answers) refuses.
				agentVersion := w.newInfo.Version
				switch {
				case !r.Unsupported:
					failf(t, "lease %s of the %s controller: HEAD's agent did not refuse it as an answer it does not know: %s (error %q)", l.JSON, pair.ctl.name, r.Lease, r.Err)
				case !strings.Contains(r.Err, "agent "+agentVersion) || !strings.Contains(r.Err, "controller "+ctlVersion):
					failf(t, "lease %s of the %s controller: HEAD's agent refused it without naming both releases (agent %s, controller %s): %q", l.JSON, pair.ctl.name, agentVersion, ctlVersion, r.Err)
				}
				var lease struct {
					Key string `json:"key"`
				}
				if err := json.Unmarshal(l.JSON, &lease); err != nil {
					t.Fatal(err)
				}
				if wantReleased := []string{lease.Key}; lease.Key != "" && !slices.Equal(r.Released, wantReleased) {
					failf(t, "lease %s: HEAD's agent refused it and released %q, want %q: a refused lease must not stay held", l.JSON, r.Released, wantReleased)
				}
			}
			unimplemented := 0
			for i, e := range errs {
				g, wa := got.Errors[i], want.Errors[i]
				if e.Kind == "unimplemented" {
					unimplemented++
					checkUnimplemented(t, e, pair.ctl == w.new, infoOf[pair.agent].Version, ctlInfo.Version)
					// HEAD's agent refuses it naming both releases.
					head := g
					if pair.agent == w.old {
						head = wa
					}
					if !head.Unsupported || !strings.Contains(head.Err, "agent "+w.newInfo.Version) || !strings.Contains(head.Err, "controller "+ctlVersion) {
						failf(t, "the %s controller does not serve a call: HEAD's agent made of it %q (refusal %v), want a refusal naming agent %s and controller %s",
							pair.ctl.name, head.Err, head.Unsupported, w.newInfo.Version, ctlVersion)
					}
				}
				// The message and the refusal are compared above; the
				// rest the same for both.
				g.Err, wa.Err, g.Unsupported, wa.Unsupported = "", "", false, false
				g.Sentinels = slices.DeleteFunc(g.Sentinels, func(s string) bool { return !common[s] })
				wa.Sentinels = slices.DeleteFunc(wa.Sentinels, func(s string) bool { return !common[s] })
				if diff := cmp.Diff(wa, g); diff != "" {
					failf(t, "a %s error: the %s agent read it otherwise than the %s agent (-%s +%s):\n%s", e.Kind, pair.agent.name, pair.ctl.name, pair.ctl.name, pair.agent.name, diff)
				}
				if len(wa.Sentinels) == 0 && e.Kind != "internal" && e.Kind != "canceled" && e.Kind != "unimplemented" {
					failf(t, "a %s error matches none of the agent's errors: %+v", e.Kind, wa)
				}
			}
			if unimplemented != 1 {
				failf(t, "the %s controller made %d answers to a method it does not serve, want 1", pair.ctl.name, unimplemented)
			}
		})
	}
}

// checkUnimplemented checks the controller's own answer to a method it
// does not serve: HEAD's (and every release's from 0.3.0) names the
// method and both releases, the agent's from its user agent; 0.2.0's is
// gRPC's, which names neither.
func checkUnimplemented(t *testing.T, e ctlError, head bool, agentVersion, ctlVersion string) {
	t.Helper()
	st := &spb.Status{}
	if err := proto.Unmarshal(e.Status, st); err != nil {
		t.Fatalf("decode the controller's status: %v", err)
	}
	if codes.Code(st.GetCode()) != codes.Unimplemented {
		failf(t, "a method the controller does not serve: code %v, want Unimplemented", codes.Code(st.GetCode()))
	}
	if !head {
		return
	}
	for _, s := range []string{"CompatLaterMethod", "controller " + ctlVersion, "agent " + agentVersion} {
		if !strings.Contains(st.GetMessage(), s) {
			failf(t, "HEAD's controller refused a method it does not serve with %q, which does not say %q", st.GetMessage(), s)
		}
	}
}

func dataOf(msgs []message) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Data
	}
	return out
}

func statusesOf(errs []ctlError) [][]byte {
	out := make([][]byte, len(errs))
	for i, e := range errs {
		out[i] = e.Status
	}
	return out
}

// The controller learns an agent's version from its gRPC user agent
// (grpc-go appends its own): each release reads the other's.
func TestUserAgents(t *testing.T) {
	w := setup(t)
	for _, pair := range []struct {
		agent peerInfo
		ctl   *peer
	}{{w.oldInfo, w.new}, {w.newInfo, w.old}} {
		var got struct {
			Version string `json:"version"`
			OK      bool   `json:"ok"`
		}
		ua := pair.agent.UserAgent + " grpc-go/1.85.0"
		if err := pair.ctl.call("ua.parse", map[string]any{"ua": ua}, &got); err != nil {
			t.Fatal(err)
		}
		if !got.OK || got.Version != pair.agent.Version {
			failf(t, "the %s controller reads user agent %q as version %q (%v), want %q", pair.ctl.name, ua, got.Version, got.OK, pair.agent.Version)
		}
	}
}
