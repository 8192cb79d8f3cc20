package peer

// testFaults, when set (only in a -tags filafaults build, faults_on.go),
// starts the fault injection of end-to-end tests on a new Transport.
var testFaults func(t *Transport)
