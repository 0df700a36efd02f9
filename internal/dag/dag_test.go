package dag

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	// A diamond: 0 → (1, 2) → 3, given out of order.
	order, cycle := Order([][]int{3: {1, 2}, 1: {0}, 2: {0}, 0: nil})
	if cycle != nil || !slices.Equal(order, []int{0, 1, 2, 3}) {
		t.Fatalf("diamond: order %v, cycle %v", order, cycle)
	}
	// 0 → 1 → 2 → 1: the cycle is 1, 2 from where it was entered.
	order, cycle = Order([][]int{{1}, {2}, {1}})
	if order != nil || !slices.Equal(cycle, []int{1, 2}) {
		t.Fatalf("cycle: order %v, cycle %v", order, cycle)
	}
	if order, cycle = Order([][]int{{0}}); !slices.Equal(cycle, []int{0}) {
		t.Fatalf("self-loop: order %v, cycle %v", order, cycle)
	}
	if order, cycle = Order(nil); len(order) != 0 || cycle != nil {
		t.Fatalf("empty: %v %v", order, cycle)
	}
}
