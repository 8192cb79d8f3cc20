package auth

import (
	"strconv"
	"testing"
)

// BenchmarkAuthorize is the per-request (and per batch item) check on the
// hot path: allowed, so it must not allocate.
func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{3, 100} {
		b.Run("perms="+strconv.Itoa(n), func(b *testing.B) {
			s := mustOpen(b, newMemKV(), "")
			perms := make([]Permission, 0, n)
			for i := 0; i < n-1; i++ {
				perms = append(perms, Permission{Consume, "tenant-" + strconv.Itoa(i) + ".*"})
			}
			perms = append(perms, Permission{Produce, "orders.*"}) // the match is last
			_, _, p := mustCreate(b, s, "bench", perms...)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := p.Authorize(OpEnqueue, "orders.eu"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAuthenticate is the handshake's key check: one SHA-256 and a
// lookup among 1000 keys.
func BenchmarkAuthenticate(b *testing.B) {
	s := mustOpen(b, newMemKV(), "")
	var secret string
	for i := 0; i < 1000; i++ {
		_, secret, _ = mustCreate(b, s, "k")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Authenticate(secret); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if !Match("orders.*", "orders.eu.west") {
			b.Fatal("no match")
		}
	}
}
