package gpu

import (
	"errors"
	"testing"
)

// The layout of the NVIDIA driver's information file (tabs, aligned values).
const nvidiaInformation = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 356\n" +
	"GPU UUID: \t GPU-9D0A3B1C-2E4F-5A6B-7C8D-9E0F1A2B3C4D\nVideo BIOS: \t 96.00.99.00.01\n" +
	"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:1B:00.0\n" +
	"Device Minor: \t 3\nGPU Firmware: \t 550.90.07\nGPU Excluded:\t No\n"

func TestParseNVIDIAInfo(t *testing.T) {
	info, err := parseNVIDIAInfo(nvidiaInformation)
	want := nvidiaInfo{Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-9d0a3b1c-2e4f-5a6b-7c8d-9e0f1a2b3c4d",
		Minor: 3, BusLocation: "0000:1b:00.0"}
	if err != nil || info != want {
		t.Errorf("parseNVIDIAInfo = %+v, %v; want %+v", info, err, want)
	}
	for _, bad := range []string{
		"", "Model: \t X\n", "Device Minor: 0\n", "Model: \nDevice Minor: 0\n",
		"Model: X\nDevice Minor: 255\n", "Model: X\nDevice Minor: -1\n", "Model: X\nDevice Minor: 01\n",
		"Model: X\nDevice Minor: 0\nGPU UUID: 1234\n", "Model: X\nDevice Minor: 0\nBus Location: here\n",
		"Model: X\nDevice Minor: 0\nGPU Excluded: Maybe\n", "Model: X\x07\nDevice Minor: 0\n",
	} {
		if got, err := parseNVIDIAInfo(bad); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("parseNVIDIAInfo(%q) = %+v, %v; want ErrInvalidValue", bad, got, err)
		}
	}
}

func TestParseAttributes(t *testing.T) {
	type result struct {
		v   any
		err error
	}
	wrap := func(v any, err error) result { return result{v, err} }
	for name, tc := range map[string]struct {
		got  result
		want any // nil: must fail with ErrInvalidValue
	}{
		"product":            {wrap(parseText(" AMD Instinct MI250X \n")), "AMD Instinct MI250X"},
		"product empty":      {wrap(parseText("\n")), nil},
		"product not utf8":   {wrap(parseText("MI\xff")), nil},
		"unique id":          {wrap(parseAMDUniqueID("5a3b2c1d0e9f8a7b\n")), "GPU-5a3b2c1d0e9f8a7b"},
		"unique id short":    {wrap(parseAMDUniqueID("abc")), "GPU-0000000000000abc"},
		"unique id zero":     {wrap(parseAMDUniqueID("0000000000000000")), nil},
		"unique id too long": {wrap(parseAMDUniqueID("15a3b2c1d0e9f8a7b")), nil},
		"nvidia uuid":        {wrap(parseNVIDIAUUID("GPU-9d0a3b1c-2e4f-5a6b-7c8d-9e0f1a2b3c4d")), "GPU-9d0a3b1c-2e4f-5a6b-7c8d-9e0f1a2b3c4d"},
		"nvidia uuid short":  {wrap(parseNVIDIAUUID("GPU-9d0a3b1c-2e4f-5a6b-7c8d-9e0f1a2b3c4")), nil},
		"nvidia MIG uuid":    {wrap(parseNVIDIAUUID("MIG-9d0a3b1c-2e4f-5a6b-7c8d-9e0f1a2b3c4d")), nil},
	} {
		if tc.want == nil {
			if !errors.Is(tc.got.err, ErrInvalidValue) {
				t.Errorf("%s: %v, %v; want ErrInvalidValue", name, tc.got.v, tc.got.err)
			}
			continue
		}
		if tc.got.err != nil || tc.got.v != tc.want {
			t.Errorf("%s: %v, %v; want %v", name, tc.got.v, tc.got.err, tc.want)
		}
	}
}

func TestParseDRMName(t *testing.T) {
	for in, want := range map[string]struct {
		kind string
		n    int
		ok   bool
	}{
		"renderD128": {drmRender, 128, true}, "card0": {drmCard, 0, true}, "card12": {drmCard, 12, true},
		"card0-DP-1": {}, "renderD": {}, "renderD0128": {}, "controlD64": {}, "card-1": {}, "renderD12345": {},
	} {
		kind, n, err := parseDRMName(in)
		if (err == nil) != want.ok || kind != want.kind || n != want.n {
			t.Errorf("parseDRMName(%q) = %q %d %v", in, kind, n, err)
		}
	}
}
