package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
)

// BenchmarkSync measures /sync through a real HTTP server on loopback over
// the real controller (sqlite, durable): "new" leases a VNI for a new owner
// every call, "steady" re-syncs known owners (Metacontroller's resyncs).
func BenchmarkSync(b *testing.B) {
	svc := newService(b, true, controller.Config{})
	srv := httptest.NewServer(New(svc, nil, followed, nil, nil))
	defer srv.Close()
	post := func(b *testing.B, uid string) {
		body, _ := json.Marshal(&Request{Object: jobObject("j"+uid, uid, nil)})
		resp, err := http.Post(srv.URL+"/sync", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var out Response
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(out.Attachments) != 1 {
			b.Fatalf("sync: %d %v %+v", resp.StatusCode, err, out)
		}
	}
	var n atomic.Int64
	b.Run("new", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				post(b, fmt.Sprintf("new-%d", n.Add(1)))
			}
		})
	})
	for i := range 100 {
		post(b, fmt.Sprintf("steady-%d", i))
	}
	b.Run("steady", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				post(b, fmt.Sprintf("steady-%d", n.Add(1)%100))
			}
		})
	})
}
