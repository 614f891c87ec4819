package idset

import "math/bits"

const full = ^uint64(0)

// Set holds ids 0..Len()-1. Level 0 has one bit per id (1 = taken); each
// higher level has one bit per word of the level below, set when that word
// is full, so a search skips full regions 64 words at a time.
type Set struct {
	n      int
	count  int
	levels [][]uint64
}

// New returns an empty set of n ids (n >= 0).
func New(n int) *Set {
	s := &Set{n: max(n, 0)}
	size := s.n
	for {
		words := (size + 63) / 64
		if words == 0 {
			words = 1
		}
		lvl := make([]uint64, words)
		// Bits past the end count as taken so they are never found.
		if rem := size % 64; rem != 0 {
			lvl[words-1] = full << rem
		} else if size == 0 {
			lvl[0] = full
		}
		s.levels = append(s.levels, lvl)
		if words == 1 {
			break
		}
		size = words
	}
	// Propagate the padding of full words upwards.
	for l := 0; l+1 < len(s.levels); l++ {
		for w, v := range s.levels[l] {
			if v == full {
				s.levels[l+1][w/64] |= 1 << (w % 64)
			}
		}
	}
	return s
}

// Len returns the number of ids the set can hold.
func (s *Set) Len() int { return s.n }

// Count returns the number of taken ids.
func (s *Set) Count() int { return s.count }

// Has reports whether id is taken; ids out of range report false.
func (s *Set) Has(id int) bool {
	if id < 0 || id >= s.n {
		return false
	}
	return s.levels[0][id/64]&(1<<(id%64)) != 0
}

// Add marks id taken and reports whether it was free before.
func (s *Set) Add(id int) bool {
	if id < 0 || id >= s.n || s.Has(id) {
		return false
	}
	s.count++
	for l := range s.levels {
		w := id / 64
		s.levels[l][w] |= 1 << (id % 64)
		if s.levels[l][w] != full {
			break
		}
		id = w
	}
	return true
}

// Remove marks id free and reports whether it was taken before.
func (s *Set) Remove(id int) bool {
	if !s.Has(id) {
		return false
	}
	s.count--
	for l := range s.levels {
		w := id / 64
		wasFull := s.levels[l][w] == full
		s.levels[l][w] &^= 1 << (id % 64)
		if !wasFull {
			break
		}
		id = w
	}
	return true
}

// NextFree returns the smallest free id >= from, or -1 when there is none.
func (s *Set) NextFree(from int) int {
	if from < 0 {
		from = 0
	}
	if from >= s.n {
		return -1
	}
	return s.next(0, from)
}

func (s *Set) next(l, from int) int {
	words := s.levels[l]
	w := from / 64
	if w >= len(words) {
		return -1
	}
	if m := ^words[w] & (full << (from % 64)); m != 0 {
		return w*64 + bits.TrailingZeros64(m)
	}
	if l+1 == len(s.levels) {
		// The top level is a single word, handled above.
		return -1
	}
	nw := s.next(l+1, w+1)
	if nw < 0 {
		return -1
	}
	return nw*64 + bits.TrailingZeros64(^words[nw])
}
