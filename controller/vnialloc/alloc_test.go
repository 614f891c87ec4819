package vnialloc

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in      string
		want    Range
		wantErr bool
	}{
		{"1024-65535", Range{1024, 65535}, false},
		{" 5 - 9 ", Range{5, 9}, false},
		{"7", Range{7, 7}, false},
		{"", Range{}, false},
		{"0-10", Range{}, true},
		{"9-5", Range{}, true},
		{"1-65536", Range{}, true},
		{"a-b", Range{}, true},
		{"-", Range{}, true},
	}
	for _, tt := range tests {
		got, err := ParseRange(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrBadRange) {
			t.Errorf("ParseRange(%q) error %v does not wrap ErrBadRange", tt.in, err)
		}
	}
}

func TestNeverHandsOutReservedOrExcluded(t *testing.T) {
	a, err := New(Range{1, 20}, time.Minute, Range{5, 7})
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16]bool{}
	for {
		v, err := a.Allocate()
		if errors.Is(err, ErrRangeFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[v] = true
	}
	for _, bad := range []uint16{1, 5, 6, 7, 10} {
		if got[bad] {
			t.Errorf("handed out %d", bad)
		}
	}
	if len(got) != 20-5 || a.Capacity() != 15 || a.Leased() != 15 {
		t.Errorf("handed out %d (capacity %d, leased %d), want 15", len(got), a.Capacity(), a.Leased())
	}
}

func TestNextFitAndQuarantine(t *testing.T) {
	now := time.Unix(1000, 0)
	a, err := New(Range{100, 104}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for want := uint16(100); want <= 102; want++ {
		if v, _ := a.Allocate(); v != want {
			t.Fatalf("Allocate = %d, want %d", v, want)
		}
	}
	a.Release(100, now)
	// Next-fit: continues after 102 rather than reusing 100.
	if v, _ := a.Allocate(); v != 103 {
		t.Fatalf("Allocate = %d, want 103", v)
	}
	if v, _ := a.Allocate(); v != 104 {
		t.Fatalf("Allocate = %d, want 104", v)
	}
	// 100 is quarantined: the range is full.
	if _, err := a.Allocate(); !errors.Is(err, ErrRangeFull) {
		t.Fatalf("Allocate err = %v, want ErrRangeFull", err)
	}
	if exp := a.Expire(now.Add(59 * time.Second)); len(exp) != 0 {
		t.Fatalf("expired early: %v", exp)
	}
	if exp := a.Expire(now.Add(time.Minute)); len(exp) != 1 || exp[0] != 100 {
		t.Fatalf("Expire = %v, want [100]", exp)
	}
	if v, _ := a.Allocate(); v != 100 {
		t.Fatalf("Allocate after quarantine = %d, want 100 (wrapped)", v)
	}
}

func TestTakeAndRestore(t *testing.T) {
	a, _ := New(Range{1024, 2047}, time.Minute)
	if err := a.Take(1500); err != nil {
		t.Fatal(err)
	}
	if err := a.Take(1500); !errors.Is(err, ErrTaken) {
		t.Fatalf("Take twice: %v", err)
	}
	if err := a.Take(3000); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Take out of range: %v", err)
	}
	if err := a.Restore(9000, time.Now()); err != nil {
		t.Fatalf("Restore out of range should drop: %v", err)
	}
	if err := a.Restore(1600, time.Unix(0, 0)); err != nil || !a.Quarantined(1600) {
		t.Fatalf("Restore: %v, quarantined=%v", err, a.Quarantined(1600))
	}
	a.SetCursor(1599)
	if v, _ := a.Allocate(); v != 1601 {
		t.Fatalf("Allocate after cursor 1599 = %d, want 1601", v)
	}
	if a.Leased() != 2 || a.InQuarantine() != 1 {
		t.Fatalf("leased %d quarantined %d", a.Leased(), a.InQuarantine())
	}
}

func BenchmarkAllocateRelease(b *testing.B) {
	for _, live := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			a, _ := New(Range{1024, 65535}, 0)
			for range live {
				if _, err := a.Allocate(); err != nil {
					b.Fatal(err)
				}
			}
			now := time.Unix(0, 0)
			for b.Loop() {
				v, err := a.Allocate()
				if err != nil {
					b.Fatal(err)
				}
				a.Release(v, now)
				a.Expire(now)
			}
		})
	}
}
