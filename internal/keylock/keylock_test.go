package keylock

import (
	"sync"
	"testing"
)

// TestLockOrdersOneKey: increments under one key's lock are not lost, and
// the set is empty once every holder is gone.
func TestLockOrdersOneKey(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	var a, b int // each guarded by its key alone
	for i := range 200 {
		key, count := "a", &a
		if i%2 == 1 {
			key, count = "b", &b
		}
		wg.Go(func() {
			unlock := s.Lock(key)
			defer unlock()
			*count++ // a data race, caught by -race, if two held one key
		})
	}
	wg.Wait()
	if a != 100 || b != 100 {
		t.Fatalf("counts = %d, %d; want 100 each", a, b)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}
