package cluster

import "testing"

// TestRank: the replicas take over from a dead leader in the order of
// their IDs, the leader left out.
func TestRank(t *testing.T) {
	voters := []uint64{3, 1, 2, 5}
	for _, c := range []struct {
		leader, node uint64
		want         int
	}{
		{3, 1, 0}, {3, 2, 1}, {3, 5, 2}, {1, 2, 0}, {1, 3, 1},
		{3, 3, -1}, // the leader itself
		{3, 4, -1}, // not a voter
	} {
		if got := rank(voters, c.leader, c.node); got != c.want {
			t.Errorf("rank(%v, leader %d, node %d) = %d, want %d", voters, c.leader, c.node, got, c.want)
		}
	}
}
