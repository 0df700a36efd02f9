// Package dag orders the nodes of a dependency graph: the stages of a
// flow, which the API validates (ipc) and the state machine orders once
// at submit (raftfsm). It owns only the graph walk, so both name the
// same cycle; each caller checks names and words its own errors. It
// imports nothing of ax.
package dag

// Order returns the nodes 0..len(deps)-1 in dependency order, each after
// the nodes it depends on (deps[i]: the indexes node i depends on, each
// in range). When the graph has a cycle, order is nil and cycle lists the
// nodes of the first cycle a depth-first search meets, in dependency
// order from the node it entered the cycle by (Cormen et al.,
// Introduction to Algorithms, 22.3–22.4: a grey node met again closes a
// cycle; finishing order is a topological order).
func Order(deps [][]int) (order, cycle []int) {
	const white, grey, black = 0, 1, 2
	color := make([]int, len(deps))
	order = make([]int, 0, len(deps))
	var path []int
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		path = append(path, i)
		for _, j := range deps[i] {
			switch color[j] {
			case grey:
				k := len(path) - 1
				for path[k] != j {
					k--
				}
				cycle = append([]int(nil), path[k:]...)
				return false
			case white:
				if !visit(j) {
					return false
				}
			}
		}
		path = path[:len(path)-1]
		color[i] = black
		order = append(order, i)
		return true
	}
	for i := range deps {
		if color[i] == white && !visit(i) {
			return nil, cycle
		}
	}
	return order, nil
}
