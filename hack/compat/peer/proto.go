package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"reflect"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

func protoFile() ([]byte, error) {
	b, err := proto.Marshal(protodesc.ToFileDescriptorProto(apiv1.File_controller_proto))
	if err != nil {
		return nil, fmt.Errorf("encode the API's descriptor: %w", err)
	}
	return b, nil
}

// jsonOpts say a message as the test compares it: proto field names and
// enum numbers, so that a value is compared, not the name one side gives
// it; unset fields left out.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true, UseEnumNumbers: true}

// Message is one encoded message of the controller API: its full name,
// its wire bytes and, from the peer that made it, its JSON.
type Message struct {
	Type string          `json:"type"`
	Data []byte          `json:"data"`
	JSON json.RawMessage `json:"json,omitempty"`
}

type genArgs struct {
	Seed  uint64 `json:"seed"`
	Count int    `json:"count"`
	// Types to make, by full name; empty: every message of the API.
	Types []string `json:"types,omitempty"`
	// Exclude names fields (full names) left unset.
	Exclude []string `json:"exclude,omitempty"`
	// Values sets fields (full names; integers and enums) always, to one
	// of the numbers given, rather than to any value or none.
	Values map[string][]int64 `json:"values,omitempty"`
}

// protoGen makes, for each message type of the API, an empty message and
// Count random ones, from the seed.
func protoGen(a genArgs) (any, error) {
	rng := rand.New(rand.NewPCG(a.Seed, a.Seed^0x9e3779b97f4a7c15))
	g := &gen{rng: rng, exclude: map[protoreflect.FullName]bool{}, values: map[protoreflect.FullName][]int64{}}
	for _, f := range a.Exclude {
		g.exclude[protoreflect.FullName(f)] = true
	}
	for f, vs := range a.Values {
		if len(vs) == 0 {
			return nil, fmt.Errorf("field %s: no values", f)
		}
		g.values[protoreflect.FullName(f)] = vs
	}
	var types []protoreflect.MessageDescriptor
	if len(a.Types) == 0 {
		msgs := apiv1.File_controller_proto.Messages()
		for i := range msgs.Len() {
			types = append(types, msgs.Get(i))
		}
	}
	for _, name := range a.Types {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			return nil, fmt.Errorf("message %s: %w", name, err)
		}
		types = append(types, mt.Descriptor())
	}
	var out []Message
	for _, md := range types {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			return nil, fmt.Errorf("message %s: %w", md.FullName(), err)
		}
		for i := range a.Count + 1 {
			m := mt.New()
			if i > 0 { // the first one stays empty
				g.fill(m, 0)
			}
			data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Interface())
			if err != nil {
				return nil, fmt.Errorf("encode %s: %w", md.FullName(), err)
			}
			js, err := jsonOpts.Marshal(m.Interface())
			if err != nil {
				return nil, fmt.Errorf("encode %s as JSON: %w", md.FullName(), err)
			}
			out = append(out, Message{Type: string(md.FullName()), Data: data, JSON: js})
		}
	}
	return out, nil
}

// gen makes random messages.
type gen struct {
	rng     *rand.Rand
	exclude map[protoreflect.FullName]bool
	values  map[protoreflect.FullName][]int64
}

// fill sets about two thirds of m's fields to random values, any field of
// any message, so that a field added to the API is covered without a
// change here; a field of g.values always, to one of its values.
func (g *gen) fill(m protoreflect.Message, depth int) {
	rng := g.rng
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if vs, ok := g.values[fd.FullName()]; ok {
			m.Set(fd, number(fd, vs[rng.IntN(len(vs))]))
			continue
		}
		if g.exclude[fd.FullName()] || rng.IntN(3) == 0 {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(4) {
				if fd.Message() != nil {
					v := l.NewElement()
					g.fill(v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(scalar(rng, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				k := scalar(rng, fd.MapKey()).MapKey()
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					g.fill(v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(rng, fd.MapValue()))
				}
			}
		case fd.Message() != nil:
			if depth < 4 {
				g.fill(m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, scalar(rng, fd))
		}
	}
}

// number is n as a value of fd, an integer or enum field.
func number(fd protoreflect.FieldDescriptor, n int64) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(n)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	}
	panic(fmt.Sprintf("field %s: kind %v is no number", fd.FullName(), fd.Kind()))
}

// scalar is a random value of fd's kind, often an edge (zero, one, the
// extremes).
func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	edge := rng.IntN(4) == 0
	pick := func(edges ...uint64) uint64 { return edges[rng.IntN(len(edges))] }
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 1)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rng.IntN(8) == 0 {
			// A number the enum does not declare (proto3 enums are
			// open): what a newer peer's new value is to an older one.
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(vals.Len() + rng.IntN(100)))
		}
		return protoreflect.ValueOfEnum(vals.Get(rng.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if edge {
			return protoreflect.ValueOfInt32([]int32{0, 1, -1, math.MaxInt32, math.MinInt32}[rng.IntN(5)])
		}
		return protoreflect.ValueOfInt32(int32(rng.Uint32()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if edge {
			return protoreflect.ValueOfInt64([]int64{0, 1, -1, math.MaxInt64, math.MinInt64}[rng.IntN(5)])
		}
		return protoreflect.ValueOfInt64(int64(rng.Uint64()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if edge {
			return protoreflect.ValueOfUint32(uint32(pick(0, 1, math.MaxUint16, math.MaxUint16+1, math.MaxUint32)))
		}
		return protoreflect.ValueOfUint32(rng.Uint32())
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if edge {
			return protoreflect.ValueOfUint64(pick(0, 1, math.MaxUint32, math.MaxUint64))
		}
		return protoreflect.ValueOfUint64(rng.Uint64())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(rng.NormFloat64()))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(rng.NormFloat64() * 1e6)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randString(rng))
	case protoreflect.BytesKind:
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic(fmt.Sprintf("field %s: kind %v", fd.FullName(), fd.Kind()))
}

// runes are what random strings are made of: names as Kubernetes writes
// them, and what JSON and protobuf must carry unharmed (quotes,
// backslashes, HTML, line separators, characters outside ASCII).
var runes = []rune("abcdefghijklmnopqrstuvwxyz0123456789-./:= \"\\<>&\u00e9\u4e16\u2028\U0001F680")

func randString(rng *rand.Rand) string {
	r := make([]rune, rng.IntN(14))
	for i := range r {
		r[i] = runes[rng.IntN(len(runes))]
	}
	return string(r)
}

type protoDecodeArgs struct {
	Messages []Message `json:"messages"`
}

// Decoded message: its JSON, whether it had fields this tree does not
// know, or why it could not be read.
type DecodedMessage struct {
	JSON    json.RawMessage `json:"json,omitempty"`
	Unknown bool            `json:"unknown,omitempty"`
	Err     string          `json:"err,omitempty"`
}

func protoDecode(a protoDecodeArgs) (any, error) {
	out := make([]DecodedMessage, len(a.Messages))
	for i, msg := range a.Messages {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(msg.Type))
		if err != nil {
			out[i].Err = fmt.Sprintf("message %s: %v", msg.Type, err)
			continue
		}
		m := mt.New().Interface()
		if err := proto.Unmarshal(msg.Data, m); err != nil {
			out[i].Err = fmt.Sprintf("decode %s: %v", msg.Type, err)
			continue
		}
		js, err := jsonOpts.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode %s as JSON: %w", msg.Type, err)
		}
		out[i] = DecodedMessage{JSON: js, Unknown: hasUnknown(m.ProtoReflect())}
	}
	return out, nil
}

// hasUnknown reports whether m or a message in it holds fields its type
// does not declare.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = found || hasUnknown(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = found || hasUnknown(mv.Message())
				return !found
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

type ctlErrorsArgs struct {
	Seed  uint64 `json:"seed"`
	Count int    `json:"count"`
	// AgentUserAgent is the calling agent's, which the controller may
	// name in its errors.
	AgentUserAgent string `json:"agentUserAgent"`
}

// CtlError is an error of the controller's API as it travels: the
// google.rpc.Status that gRPC carries in its trailer.
type CtlError struct {
	Kind   string `json:"kind"`
	Status []byte `json:"status"`
}

// ctlErrors makes Count errors of every kind the controller's API
// returns, with random details, as the controller's gRPC server sends
// them (grpcapi.Status), and one answer to a method it does not serve, as
// a later agent may call.
func ctlErrors(ctx context.Context, a ctlErrorsArgs) (any, error) {
	rng := rand.New(rand.NewPCG(a.Seed, a.Seed^0xd1b54a32d192ed03))
	word := func() string { return randString(rng) + "x" }
	kinds := []struct {
		kind string
		make func() error
	}{
		{"field", func() error { return &controller.FieldError{Field: word(), Reason: word()} }},
		{"exhausted", func() error {
			return &controller.ExhaustedError{Resource: word(), Range: word(), Capacity: rng.IntN(1 << 20),
				Err: fmt.Errorf("%w: %s", controller.ErrExhausted, word())}
		}},
		{"taken", func() error {
			slice := fmt.Sprintf("10.%d.%d.0/24", rng.IntN(256), rng.IntN(256))
			if rng.IntN(2) == 0 {
				first := 1024 + rng.IntN(60000)
				slice = fmt.Sprintf("%d-%d", first, first+63)
			}
			return &slices.TakenError{Pool: word(), Index: rng.IntN(1 << 16), Slice: slice, Node: word()}
		}},
		{"invalid", func() error { return fmt.Errorf("%w: %s", controller.ErrInvalidArgument, word()) }},
		{"unavailable", func() error { return fmt.Errorf("%w: %s", controller.ErrUnavailable, word()) }},
		{"notfound", func() error { return fmt.Errorf("%w: %s", controller.ErrNotFound, word()) }},
		{"ownergone", func() error { return fmt.Errorf("%w: %s", controller.ErrOwnerGone, word()) }},
		{"nonode", func() error { return fmt.Errorf("%w: %s", auth.ErrNoNode, word()) }},
		{"wrongnode", func() error { return fmt.Errorf("%w: %s", auth.ErrWrongNode, word()) }},
		{"internal", func() error { return errors.New(word()) }},
		{"canceled", func() error { return fmt.Errorf("%s: %w", word(), context.Canceled) }},
		{"deadline", func() error { return fmt.Errorf("%s: %w", word(), context.DeadlineExceeded) }},
	}
	var out []CtlError
	for range a.Count {
		for _, k := range kinds {
			st := status.Convert(grpcapi.Status(k.make()))
			b, err := proto.Marshal(st.Proto())
			if err != nil {
				return nil, fmt.Errorf("encode status: %w", err)
			}
			out = append(out, CtlError{Kind: k.kind, Status: b})
		}
	}
	st, err := unknownMethod(ctx, a.AgentUserAgent)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	return append(out, CtlError{Kind: "unimplemented", Status: b}), nil
}

// laterMethod is a method of the controller's service that no release
// serves: what an agent of a later release may call.
const laterMethod = "/slingshot.controller.v1.Controller/CompatLaterMethod"

// unknownMethod is this tree's controller's answer to laterMethod, from a
// gRPC server as the controller runs it (serverOptions), called on
// loopback by a client of user agent ua.
func unknownMethod(ctx context.Context, ua string) (*status.Status, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	g := grpc.NewServer(serverOptions()...)
	// The service is registered, its methods never called: only the
	// method is unknown.
	grpcapi.NewServer(nil, time.Minute).Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	defer func() {
		g.Stop()
		<-served
	}()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if ua != "" {
		opts = append(opts, grpc.WithUserAgent(ua))
	}
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, laterMethod, &apiv1.ListVNIsRequest{}, &apiv1.ListVNIsResponse{})
	st := status.Convert(err)
	if st.Code() != codes.Unimplemented {
		return nil, fmt.Errorf("call %s: %v, want Unimplemented", laterMethod, err)
	}
	return st, nil
}

// sentinels are controllerclient's errors that an agent acts on, by name.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrUnavailable", controllerclient.ErrUnavailable},
	{"ErrExhausted", controllerclient.ErrExhausted},
	{"ErrInvalidArgument", controllerclient.ErrInvalidArgument},
	{"ErrNotFound", controllerclient.ErrNotFound},
	{"ErrOwnerGone", controllerclient.ErrOwnerGone},
	{"ErrDenied", controllerclient.ErrDenied},
	{"ErrNoPodVNIPool", controllerclient.ErrNoPodVNIPool},
	{"ErrSliceTaken", controllerclient.ErrSliceTaken},
	{"ErrReleaseRefused", controllerclient.ErrReleaseRefused},
}

func leaseSchema() []SchemaPath {
	var out []SchemaPath
	schemaOf(reflect.TypeFor[controllerclient.Lease](), "", false, &out)
	return out
}

func sentinelNames() []string {
	out := make([]string, len(sentinels))
	for i, s := range sentinels {
		out[i] = s.name
	}
	return out
}

type clientArgs struct {
	// Leases are JobVNILease messages, Statuses google.rpc.Status
	// messages, both encoded, as a controller answers AcquireJobVNI.
	Leases   [][]byte `json:"leases"`
	Statuses [][]byte `json:"statuses"`
	// ControllerHeader, when set, is the header in which the controller
	// that answers names its release, ControllerVersion (Info's).
	ControllerHeader  string `json:"controllerHeader,omitempty"`
	ControllerVersion string `json:"controllerVersion,omitempty"`
}

// ClientLease is what the agent's controller client made of an answer:
// the lease, or the error and whether it is a refusal of what the agent
// does not know (see unsupported); Released are the lease keys the client
// gave back meanwhile.
type ClientLease struct {
	Lease       json.RawMessage `json:"lease,omitempty"`
	Err         string          `json:"err,omitempty"`
	Unsupported bool            `json:"unsupported,omitempty"`
	Released    []string        `json:"released,omitempty"`
}

// ClientError is how the agent's controller client classifies an error.
type ClientError struct {
	// Err is the client's error; Unsupported whether it is its refusal of
	// what the releases do not share (see unsupported).
	Err         string            `json:"err"`
	Unsupported bool              `json:"unsupported,omitempty"`
	Code        string            `json:"code"`
	Reason      string            `json:"reason,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Sentinels   []string          `json:"sentinels"`
	SliceTaken  *SliceTaken       `json:"sliceTaken,omitempty"`
}

// SliceTaken is a controllerclient.SliceTakenError's content.
type SliceTaken struct {
	Pool   string `json:"pool"`
	Index  int    `json:"index"`
	Node   string `json:"node"`
	Prefix string `json:"prefix"`
}

type clientResult struct {
	Leases []ClientLease `json:"leases"`
	Errors []ClientError `json:"errors"`
}

// answer is a controller that answers AcquireJobVNI with one encoded
// lease or status, decoded here as this tree's gRPC client would, with
// its version in the header where its release sends one (as its gRPC
// server does, a header the client asks for with grpc.Header); the
// client calls nothing else for a lease the controller made, but
// ReleaseJobVNI for one it refuses, whose keys answer records.
type answer struct {
	apiv1.ControllerClient
	lease    []byte
	status   *spb.Status
	header   metadata.MD
	released *[]string
}

func (a answer) AcquireJobVNI(_ context.Context, _ *apiv1.AcquireJobVNIRequest, opts ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	a.setHeader(opts)
	if a.status != nil {
		return nil, status.ErrorProto(a.status)
	}
	l := &apiv1.JobVNILease{}
	if err := proto.Unmarshal(a.lease, l); err != nil {
		return nil, fmt.Errorf("decode lease: %w", err)
	}
	return l, nil
}

func (a answer) ReleaseJobVNI(_ context.Context, in *apiv1.ReleaseJobVNIRequest, opts ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	a.setHeader(opts)
	*a.released = append(*a.released, in.GetKey())
	return &apiv1.JobVNILease{Key: in.GetKey()}, nil
}

func (a answer) setHeader(opts []grpc.CallOption) {
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && h.HeaderAddr != nil && a.header != nil {
			*h.HeaderAddr = a.header.Copy()
		}
	}
}

// acquire asks the client for a lease from api, once, without retries.
func acquire(ctx context.Context, api apiv1.ControllerClient) (controllerclient.Lease, error) {
	c, err := controllerclient.New(api, controllerclient.Options{Node: "node-a", Retry: backoff.Policy{Attempts: 1}})
	if err != nil {
		return controllerclient.Lease{}, err
	}
	defer c.Close()
	// A lease from the node's own slice would wait for the pool, which
	// nothing fills here: the test leaves from_node_slice out, and this
	// bounds a mistake.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.AcquireJobVNI(ctx, controllerclient.PodRef{Namespace: "ns", Name: "pod"})
}

func clientRead(ctx context.Context, a clientArgs) (any, error) {
	res := clientResult{Leases: []ClientLease{}, Errors: []ClientError{}}
	var header metadata.MD
	if a.ControllerHeader != "" {
		header = metadata.Pairs(a.ControllerHeader, a.ControllerVersion)
	}
	for _, b := range a.Leases {
		var released []string
		l, err := acquire(ctx, answer{lease: b, header: header, released: &released})
		if err != nil {
			res.Leases = append(res.Leases, ClientLease{Err: err.Error(), Unsupported: unsupported(err), Released: released})
			continue
		}
		js, err := json.Marshal(l)
		if err != nil {
			return nil, fmt.Errorf("encode lease: %w", err)
		}
		res.Leases = append(res.Leases, ClientLease{Lease: js, Released: released})
	}
	for _, b := range a.Statuses {
		st := &spb.Status{}
		if err := proto.Unmarshal(b, st); err != nil {
			return nil, fmt.Errorf("decode status: %w", err)
		}
		var released []string
		_, err := acquire(ctx, answer{status: st, header: header, released: &released})
		if err == nil {
			return nil, fmt.Errorf("status %v: the client saw no error", st)
		}
		ce := ClientError{Err: err.Error(), Unsupported: unsupported(err), Code: status.Code(err).String(), Sentinels: []string{}}
		var e *controllerclient.Error
		if errors.As(err, &e) {
			ce.Code, ce.Reason, ce.Metadata = e.Code.String(), e.Reason, e.Metadata
		}
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				ce.Sentinels = append(ce.Sentinels, s.name)
			}
		}
		var taken *controllerclient.SliceTakenError
		if errors.As(err, &taken) {
			ce.SliceTaken = &SliceTaken{Pool: taken.Pool, Index: taken.Index, Node: taken.Node}
			if taken.Prefix.IsValid() {
				ce.SliceTaken.Prefix = taken.Prefix.String()
			}
		}
		res.Errors = append(res.Errors, ce)
	}
	return res, nil
}
