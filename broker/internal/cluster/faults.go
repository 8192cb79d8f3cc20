package cluster

// snapshotStored, when set (only in a -tags filafaults build,
// faults_on.go, and by tests), runs on the driver goroutine after a
// received snapshot is durable in a group's log and before the replica
// installs it: a node stopped then must install it at its next start.
var snapshotStored func()
