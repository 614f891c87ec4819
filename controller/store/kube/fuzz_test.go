package kube

import (
	"testing"
)

// FuzzDecodeWAL: a journal chunk read back from the API never panics the
// decoder, and what it accepts encodes back to chunks it accepts again.
func FuzzDecodeWAL(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"res":"vnileases","name":"vni-u1","from":0,"lease":{"Key":"job/ns/u1","VNI":1500,"Scope":"job","Version":1}}]`,
		`[{"res":"nodeslices","name":"pod-vni-3","from":2,"slice":{"Pool":"pod-vni","Index":3,"Node":"n1","Version":3}}]`,
		`[{"res":"vniquarantines","name":"vni-7","from":1}]`,
		`[{"res":"vniquarantines","name":"vni-7","from":0,"quarantine":{"VNI":7,"Released":"2024-01-01T00:00:00Z","Version":1}}]`,
		`[{"res":"vnileases","name":"x","lease":{"Key":"job/a/b","VNI":5,"Version":1},"slice":{"Pool":"p","Version":1}}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ops, err := DecodeWAL(in)
		if err != nil {
			return
		}
		chunks, err := encodeWAL(ops, 1<<20)
		if err != nil {
			t.Fatalf("encode accepted ops: %v", err)
		}
		for _, c := range chunks {
			if _, err := DecodeWAL(c); err != nil {
				t.Fatalf("re-decode: %v", err)
			}
		}
	})
}

// FuzzDecodeObjects: any JSON object read from the API as a lease, slice or
// quarantine either decodes to a record the store accepts or is refused
// with an error; never a panic.
func FuzzDecodeObjects(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"VNILease","metadata":{"name":"vni-u1","annotations":{"slingshot.hpe.com/version":"1"}},"spec":{"vni":1500,"scope":"job","leaseKey":"job/ns/u1","owner":{"kind":"Job","name":"j"},"created":"2024-01-01T00:00:00.000Z"},"status":{"nodes":["n1"],"nodeCount":1}}`,
		`{"metadata":{"name":"pod-vni-3","annotations":{"slingshot.hpe.com/version":"4"}},"spec":{"pool":"pod-vni","index":3,"node":"n1"},"status":{"expires":"2024-01-01T00:00:00Z","allocated":2}}`,
		`{"metadata":{"name":"vni-9","annotations":{"slingshot.hpe.com/version":"1"}},"spec":{"vni":9,"released":"2024-01-01T00:00:00.5Z"}}`,
		`{"spec":{"vni":70000}}`,
		`{"metadata":{"annotations":{"slingshot.hpe.com/version":"-1"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var lo leaseObject
		if decodeJSON(in, &lo) == nil {
			if l, err := decodeLease(&lo); err == nil && (l.Key == "" || l.VNI == 0 || l.Version == 0) {
				t.Fatalf("accepted lease %+v", l)
			}
		}
		var so sliceObject
		if decodeJSON(in, &so) == nil {
			if s, err := decodeSlice(&so); err == nil && (s.Pool == "" || s.Index < 0 || s.Allocated < 0 || s.Version == 0) {
				t.Fatalf("accepted slice %+v", s)
			}
		}
		var qo quarantineObject
		if decodeJSON(in, &qo) == nil {
			if q, err := decodeQuarantine(&qo); err == nil && (q.VNI == 0 || q.Version == 0) {
				t.Fatalf("accepted quarantine %+v", q)
			}
		}
		var jo journalObject
		if decodeJSON(in, &jo) == nil && jo.Spec.Pending != "" {
			_, _ = DecodeWAL(jo.Spec.Pending)
		}
	})
}
