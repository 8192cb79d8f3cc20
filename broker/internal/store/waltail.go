package store

import (
	"reflect"
	"unsafe"

	"github.com/tidwall/wal"
)

// The log keeps its newest segment's bytes in memory, in a buffer it grows
// by appending each record as it writes it (tidwall/wal v1.2.1: the tail
// segment's ebuf). A buffer of megabytes grown by appending is copied and
// reallocated many times over (a quarter more each time), so every byte
// written costs about four more bytes copied and allocated: under
// sustained writes that was a fifth of the broker's CPU, and most of its
// garbage. The store reads nothing back through the log (values come from
// the files, by pread), so nothing but this copying depends on the
// buffer.
//
// roomyTail gives the tail segment's buffer, once per segment, the
// capacity of a whole segment, with its bytes unchanged: the records of a
// segment then go into it without reallocating. It returns the tail's
// buffer. spare is the buffer it gave the previous tail, which it reuses
// if it is large enough: the caller passes it only once the log has let
// go of it (ClearCache drops a closed segment's buffer). It reaches the
// buffer by its field names and types through reflect, checking both, and
// does nothing (returns nil) if the log's layout is not the one it knows;
// a test keeps the known layout in sync with the version in go.mod.
//
// The caller excludes every other use of the log (the committer, holding
// logMu for writing).
func roomyTail(l *wal.Log, capacity int, spare []byte) []byte {
	p := tailBuffer(l)
	if p == nil {
		return nil
	}
	if cap(*p) >= capacity {
		return *p
	}
	b := spare[:0]
	if cap(b) < capacity {
		b = make([]byte, 0, capacity)
	}
	*p = append(b, *p...)
	return *p
}

// tailBuffer returns the address of the log's tail segment buffer, or nil
// if the log does not have the fields roomyTail knows.
func tailBuffer(l *wal.Log) *[]byte {
	if l == nil {
		return nil
	}
	segs := reflect.ValueOf(l).Elem().FieldByName("segments")
	if !segs.IsValid() || segs.Kind() != reflect.Slice || segs.Len() == 0 {
		return nil
	}
	tail := segs.Index(segs.Len() - 1)
	if tail.Kind() != reflect.Pointer || tail.IsNil() || tail.Elem().Kind() != reflect.Struct {
		return nil
	}
	ebuf := tail.Elem().FieldByName("ebuf")
	if !ebuf.IsValid() || ebuf.Type() != reflect.TypeFor[[]byte]() {
		return nil
	}
	return (*[]byte)(unsafe.Pointer(ebuf.UnsafeAddr()))
}
