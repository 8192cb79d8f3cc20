// Package store is the broker's storage engine: an ordered key-value store
// whose writes are mutation groups. The scheduler's messages, the runtime
// config store, API keys and ACLs all persist through it.
//
// # Contract
//
// The package's consumers declare the interface they need (the shard
// package declares Storage); Disk and Mem implement it. Every
// implementation keeps these promises:
//
//  1. A mutation group (a Batch) is applied atomically: after any crash,
//     all of it or none of it is present.
//  2. A group is durable, fsynced to disk, before Apply returns nil or
//     ApplyAsync calls done(nil). Nothing is acknowledged that a crash of
//     the process or of the machine can take back.
//  3. Groups are applied in submission order: a later group's put or
//     delete of a key wins over an earlier group's, and within a group a
//     later mutation wins over an earlier one (a range delete removes the
//     keys that earlier mutations put, and not those put after it). A
//     group is visible to Get and Scan exactly when it is acknowledged,
//     never before it is durable and never in part.
//  4. Scan and ScanKeys visit keys in ascending byte order, over one
//     moment's state.
//  5. Open returns exactly the state as of the last durable group. It cuts
//     a torn final commit (which was never acknowledged) with one log line,
//     and refuses to start on damage to anything durable, or on a log that
//     ends before its last durable group (the durable-position marker,
//     marker.go), unless Options.Repair is set; repair drops only what is
//     damaged or missing, and logs each record it drops.
//  6. A failed fsync, or a write that failed for another reason than a
//     lack of space, is sticky: every later Apply fails, so the store never
//     reports durability it does not have, and Failed is closed. Reads go
//     on serving the last durable state.
//  7. A write that failed for lack of space is undone and does not stop
//     the store: it refuses the groups marked RefuseWhenFull while the disk
//     is full, writes the others from its reserve, and accepts growth again
//     once space returns (space.go; Health reports the condition).
//
// Get and Scan may run concurrently with Apply from any goroutine.
//
// # Disk
//
// Disk keeps a log of records, one per group (the format is described in
// record.go), in segment files written by github.com/tidwall/wal, and an
// index of every key (index.go) that holds the position of its value in
// the log (segment, offset, length): memory grows with the number of keys,
// not with value bytes. Keys shaped as the scheduler's, a prefix, 0x00 and
// a 16-byte ID, cost about 28 bytes each (40 if their IDs arrive in random
// order) in arrays the garbage collector does not scan; other keys are
// entries of a github.com/tidwall/btree. Values are read back with pread,
// through a fixed-size cache of the newest log bytes.
//
// A group holds puts, deletes and range deletes, which apply in order. A
// range delete is one mutation in the log however many keys it removes;
// the index drops whole the leaves that lie inside its range.
//
// Group commit: one committer goroutine takes every group submitted since
// its last write, writes them all at once (one WriteBatch of the log per
// segment they reach) and makes them durable with one fsync; groups that
// arrive during that fsync go into the next one. There is no non-durable
// mode except Options.UnsafeNoSync.
//
// Recovery is described in recover.go, the durable-position marker in
// marker.go, space reclamation in compact.go, a full disk in space.go.
package store
