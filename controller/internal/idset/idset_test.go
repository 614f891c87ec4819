package idset

import (
	"math/rand/v2"
	"testing"
)

func TestNextFreeMatchesLinearScan(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 4095, 4096, 4097, 65536, 262145} {
		s := New(n)
		ref := make([]bool, n)
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		for i := range 3 * n {
			id := rng.IntN(n + 2)
			if i%3 == 0 {
				if got, want := s.Remove(id), id < n && ref[id]; got != want {
					t.Fatalf("n=%d Remove(%d)=%v want %v", n, id, got, want)
				}
				if id < n {
					ref[id] = false
				}
			} else {
				if got, want := s.Add(id), id < n && !ref[id]; got != want {
					t.Fatalf("n=%d Add(%d)=%v want %v", n, id, got, want)
				}
				if id < n {
					ref[id] = true
				}
			}
			if i%17 == 0 {
				from := rng.IntN(n+1) - 1
				if got, want := s.NextFree(from), linearNext(ref, from); got != want {
					t.Fatalf("n=%d NextFree(%d)=%d want %d", n, from, got, want)
				}
			}
		}
		count := 0
		for _, v := range ref {
			if v {
				count++
			}
		}
		if s.Count() != count {
			t.Fatalf("n=%d Count=%d want %d", n, s.Count(), count)
		}
	}
}

func TestFullSetHasNoFree(t *testing.T) {
	s := New(5000)
	for i := range 5000 {
		s.Add(i)
	}
	if got := s.NextFree(0); got != -1 {
		t.Fatalf("NextFree on full set = %d", got)
	}
	s.Remove(4321)
	if got := s.NextFree(0); got != 4321 {
		t.Fatalf("NextFree = %d, want 4321", got)
	}
}

func linearNext(ref []bool, from int) int {
	for i := max(from, 0); i < len(ref); i++ {
		if !ref[i] {
			return i
		}
	}
	return -1
}

func BenchmarkNextFreeNearlyFull(b *testing.B) {
	s := New(65536)
	for i := range 65535 {
		s.Add(i)
	}
	for b.Loop() {
		if s.NextFree(0) != 65535 {
			b.Fatal("wrong")
		}
	}
}
