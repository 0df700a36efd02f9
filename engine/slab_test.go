package engine

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestKeyIndex_AgainstMap puts and deletes keys at random, through growth
// and backward-shift deletion, and checks every lookup against a map.
func TestKeyIndex_AgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sl := newSlab[string]()
	ki := newKeyIndex()
	model := map[string]int32{}
	lookup := func(k string) (int32, bool) {
		h := ki.hash(k)
		_, i, ok := ki.tab(h).find(h, k, &sl)
		return i, ok
	}
	for op := range 200_000 {
		k := "k" + strconv.Itoa(rng.IntN(20_000))
		h := ki.hash(k)
		tab := ki.tab(h)
		if rng.IntN(5) < 3 {
			tab.reserve()
			pos, _, found := tab.find(h, k, &sl)
			if _, ok := model[k]; ok != found {
				t.Fatalf("op %d: find(%s) = %v, model %v", op, k, found, ok)
			}
			if !found {
				i := sl.alloc()
				sl.at(i).payload = k
				tab.put(pos, h, i)
				ki.n++
				model[k] = i
			}
		} else {
			pos, i, found := tab.find(h, k, &sl)
			if mi, ok := model[k]; ok != found || ok && mi != i {
				t.Fatalf("op %d: find(%s) = %d %v, model %d %v", op, k, i, found, mi, ok)
			}
			if found {
				if got := tab.findIdx(h, i); got != pos {
					t.Fatalf("findIdx = %d, find = %d", got, pos)
				}
				tab.del(pos)
				ki.n--
				sl.release(i)
				delete(model, k)
			}
		}
		if op%10_000 == 0 {
			for k, i := range model {
				if got, ok := lookup(k); !ok || got != i {
					t.Fatalf("op %d: lost %s", op, k)
				}
			}
		}
	}
	n := 0
	for i := range ki.tabs {
		n += ki.tabs[i].n
	}
	if n != len(model) || ki.n != len(model) || sl.used != len(model) {
		t.Fatalf("counts: tabs %d, n %d, slab %d, model %d", n, ki.n, sl.used, len(model))
	}
	// Empty everything: big tables and the slab give their memory back.
	for k, i := range model {
		h := ki.hash(k)
		tab := ki.tab(h)
		tab.del(tab.findIdx(h, i))
		sl.release(i)
	}
	for i := range ki.tabs {
		if len(ki.tabs[i].slots) > keyTabShrink {
			t.Fatalf("table %d keeps %d slots", i, len(ki.tabs[i].slots))
		}
	}
	if len(sl.chunks) != 1 {
		t.Fatalf("empty slab keeps %d chunks", len(sl.chunks))
	}
	// The slab still works after shrinking.
	seen := map[int32]bool{}
	for range 3 * slabChunk {
		i := sl.alloc()
		if seen[i] {
			t.Fatalf("index %d handed out twice", i)
		}
		seen[i] = true
	}
}
