package uapi

import (
	"encoding"
	"errors"
	"testing"
)

// seed adds the golden images and a few malformed inputs to a corpus.
func seed(f *testing.F, names ...string) {
	golden := loadGolden(f)
	for _, n := range names {
		f.Add(golden[n])
	}
	f.Add([]byte{})
	f.Add([]byte{28, 0, 0})
	f.Add(make([]byte, SvcAllocCmdSize))
}

// roundTrip checks the decoder's contract on arbitrary input: it returns a
// value or an error wrapping ErrSize/ErrOp, never panics, and what it
// decodes survives encoding and decoding again unchanged.
func roundTrip[T comparable](t *testing.T, b []byte, size int, decode func([]byte) (T, error)) {
	v, err := decode(b)
	if err != nil {
		if !errors.Is(err, ErrSize) && !errors.Is(err, ErrOp) {
			t.Fatalf("error %v wraps neither ErrSize nor ErrOp", err)
		}
		if len(b) == size && !errors.Is(err, ErrOp) {
			t.Fatalf("exact-size input rejected: %v", err)
		}
		return
	}
	if len(b) != size {
		t.Fatalf("accepted %d bytes, size is %d", len(b), size)
	}
	m, ok := any(v).(encoding.BinaryMarshaler)
	if !ok {
		t.Fatalf("%T is not a BinaryMarshaler", v)
	}
	out, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("re-encode %+v: %v", v, err)
	}
	if len(out) != size {
		t.Fatalf("re-encoded to %d bytes, want %d", len(out), size)
	}
	again, err := decode(out)
	if err != nil {
		t.Fatalf("decode of re-encoding: %v", err)
	}
	if again != v {
		t.Fatalf("round trip changed the value:\n%+v\n%+v", v, again)
	}
}

func FuzzSvcDescUnmarshal(f *testing.F) {
	seed(f, "svc_desc")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcDescSize, DecodeSvcDesc)
	})
}

func FuzzDecodeSvcAlloc(f *testing.F) {
	seed(f, "alloc")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcAllocCmdSize, DecodeSvcAlloc)
	})
}

func FuzzDecodeSvcDestroy(f *testing.F) {
	seed(f, "destroy")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcDestroyCmdSize, DecodeSvcDestroy)
	})
}

func FuzzDecodeSvcListGet(f *testing.F) {
	seed(f, "list")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcListGetCmdSize, DecodeSvcListGet)
	})
}

func FuzzDecodeSvcGet(f *testing.F) {
	seed(f, "get")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcGetCmdSize, DecodeSvcGet)
	})
}

func FuzzDecodeSvcEnable(f *testing.F) {
	seed(f, "enable")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcEnableCmdSize, DecodeSvcEnable)
	})
}

func FuzzDecodeSvcSetNetns(f *testing.F) {
	seed(f, "set_netns")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcSetNetnsCmdSize, DecodeSvcSetNetns)
	})
}

func FuzzDecodeSvcGetNetns(f *testing.F) {
	seed(f, "get_netns")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcGetNetnsCmdSize, DecodeSvcGetNetns)
	})
}

func FuzzDecodeSvcVNIRange(f *testing.F) {
	seed(f, "set_vni_range", "get_vni_range")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcVNIRangeCmdSize, DecodeSvcVNIRange)
	})
}

// FuzzDecodeResponses covers the response decoders and the service-list
// decoder, which the same bytes exercise at different sizes.
func FuzzDecodeResponses(f *testing.F) {
	seed(f, "alloc_resp", "list_resp", "value_resp", "fail_info", "svc_desc", "vni_range_resp")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, SvcAllocRespSize, DecodeSvcAllocResp)
		roundTrip(t, b, SvcListGetRespSize, DecodeSvcListGetResp)
		roundTrip(t, b, ValueRespSize, DecodeValueResp)
		roundTrip(t, b, VNIRangeRespSize, DecodeVNIRangeResp)
		roundTrip(t, b, FailInfoSize, func(b []byte) (FailInfo, error) {
			var fi FailInfo
			err := fi.UnmarshalBinary(b)
			return fi, err
		})
		roundTrip(t, b, RsrcLimitsLen, func(b []byte) (RsrcLimits, error) {
			var l RsrcLimits
			err := l.UnmarshalBinary(b)
			return l, err
		})
		descs, err := DecodeSvcList(b)
		if err != nil {
			if !errors.Is(err, ErrSize) {
				t.Fatalf("DecodeSvcList error %v does not wrap ErrSize", err)
			}
			return
		}
		if len(descs)*SvcDescSize != len(b) {
			t.Fatalf("decoded %d descriptors from %d bytes", len(descs), len(b))
		}
		if _, err := PeekOp(b); err != nil && len(b) >= 4 {
			t.Fatalf("PeekOp: %v", err)
		}
	})
}
