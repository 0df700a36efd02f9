package cluster

import (
	"context"
	"reflect"
	"testing"

	"github.com/axsched/ax/sidecar/peerapi"
)

// A node joining at the Raft address of a member with another id (a pod
// killed without leaving, whose address a new pod got) makes the leader
// remove that member first: raft refuses one address twice ("found
// duplicate address in configuration"), so the new pod could never join.
// A member at another address, and the leader itself, stay.
// (TestPods_AddressReuse.)
func TestJoinAtAStaleMembersAddressRemovesIt(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3")
	if err := e.m.Join(context.Background(), peerapi.Info{ID: "n4", RaftAddr: "n3:raft", PeerAddr: "n3:peer"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Join(context.Background(), peerapi.Info{ID: "n5", RaftAddr: "n1:raft"}); err != nil {
		t.Fatal(err) // raft (not the fake) would refuse this one
	}
	if got, want := e.raft.log(), []string{"remove n3", "add-nonvoter n4", "add-nonvoter n5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
}
