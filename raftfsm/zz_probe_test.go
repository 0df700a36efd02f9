package raftfsm

import "testing"

func TestZZProbeSnapThenRestore(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	atSnap := src.dump()
	other := newEnv(t)
	other.apply(1, submitCmd("other", spec("h", "p"), 1, 1))
	otherStream := persist(t, other.snapshot())

	snap := src.snapshot()
	if err := src.restore(otherStream); err != nil {
		t.Fatal(err)
	}
	stream := persist(t, snap)
	dst := newEnv(t)
	err := dst.restore(stream)
	t.Logf("restore err: %v, len %d", err, len(stream))
	if d := diffDumps(dst.dump(), atSnap); d != "" {
		t.Logf("diff:\n%s", d)
	}
}
