package grpcapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzDir prefers tmpfs so that the real store's fsyncs stay cheap.
func fuzzDir(t testing.TB) string {
	if d, err := os.MkdirTemp("/dev/shm", "ctlfuzz"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// fuzzController runs a controller with a pod VNI pool and an IP pool
// over a real store until f ends, and returns it loaded.
func fuzzController(f *testing.F) *controller.Allocator {
	st, err := sqlite.Open(f.Context(), filepath.Join(fuzzDir(f), "c.db"))
	if err != nil {
		f.Fatal(err)
	}
	pool, _ := slices.ParseIPPool("hsn0=10.0.0.0/16:/24")
	svc, err := controller.New(st, nil, nil, controller.Config{Quarantine: -1,
		PodVNIRange: vnialloc.Range{Min: 4096, Max: 8191}, PodVNISliceSize: 16, IPPools: []slices.PoolSpec{pool}})
	if err != nil {
		st.Close()
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(f.Context()))
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	f.Cleanup(func() { cancel(); <-done; st.Close() })
	select {
	case <-svc.Loaded():
	case <-time.After(10 * time.Second):
		f.Fatal("not loaded")
	}
	return svc
}

// addAPISeeds adds a request of each method, valid and not, to f's corpus.
func addAPISeeds(f *testing.F) {
	seed := func(m uint8, msg proto.Message) {
		b, _ := proto.Marshal(msg)
		f.Add(m, b)
	}
	seed(0, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "p", Uid: "u"}, Node: "n1"})
	seed(0, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "A", Name: "-"}, Node: ""})
	seed(1, &apiv1.ReleaseJobVNIRequest{Key: "pod/a/u", Node: "n1"})
	seed(2, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "pod-vni", Count: 2})
	seed(2, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "hsn0", Count: 1 << 31})
	seed(2, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "hsn0", Index: proto.Uint32(7)})
	seed(2, &apiv1.AcquireSlicesRequest{Node: "n2", Pool: "hsn0", Index: proto.Uint32(7)})
	seed(2, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "pod-vni", Index: proto.Uint32(1 << 31)})
	seed(3, &apiv1.RenewSlicesRequest{Node: "n1", Usage: []*apiv1.SliceUsage{{Pool: "pod-vni", Index: 0, Allocated: 3, Open: true}, {Pool: "x", Index: 1 << 30}}})
	seed(3, &apiv1.RenewSlicesRequest{Node: "n1", VnisReported: true, InUseVnis: []uint32{1024, 65535, 65536}})
	seed(4, &apiv1.ReleaseSliceRequest{Node: "n1", Pool: "pod-vni", Index: 0})
	seed(5, &apiv1.ListVNIsRequest{})
	seed(6, &apiv1.ListSlicesRequest{Pool: "hsn0", Node: "n1"})
}

// FuzzAPI feeds arbitrary protobuf bytes as every request type to the
// server over a real (loaded) controller: no panic, and every error is
// one of the documented codes.
func FuzzAPI(f *testing.F) {
	addAPISeeds(f)
	srv := NewServer(fuzzController(f), time.Minute)
	allowed := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true,
		codes.ResourceExhausted: true, codes.FailedPrecondition: true, codes.AlreadyExists: true}

	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		var err error
		var resp proto.Message
		ctx := t.Context()
		switch method % 7 {
		case 0:
			var r apiv1.AcquireJobVNIRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			var l *apiv1.JobVNILease
			l, err = srv.AcquireJobVNI(ctx, &r)
			if err == nil && l.Vni != 0 && (l.Vni < 1024 || l.Vni > 65535 || (l.Vni >= 4096 && l.Vni <= 8191)) {
				t.Fatalf("vni %d outside the job range", l.Vni)
			}
			resp = l
		case 1:
			var r apiv1.ReleaseJobVNIRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.ReleaseJobVNI(ctx, &r)
		case 2:
			var r apiv1.AcquireSlicesRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.AcquireSlices(ctx, &r)
		case 3:
			var r apiv1.RenewSlicesRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.RenewSlices(ctx, &r)
		case 4:
			var r apiv1.ReleaseSliceRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.ReleaseSlice(ctx, &r)
		case 5:
			var r apiv1.ListVNIsRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.ListVNIs(ctx, &r)
		case 6:
			var r apiv1.ListSlicesRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			resp, err = srv.ListSlices(ctx, &r)
		}
		if code := status.Code(err); !allowed[code] {
			t.Fatalf("method %d: code %v: %v", method%7, code, err)
		}
		if err == nil {
			if _, merr := proto.Marshal(resp); merr != nil {
				t.Fatalf("response does not marshal: %v", merr)
			}
		}
	})
}
