package shard

import "time"

// testClock, when set (only in a -tags filafaults build, faults_on.go),
// is the clock of every shard opened without Config.Clock.
var testClock func() time.Time
