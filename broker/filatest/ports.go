package filatest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePorts returns n distinct 127.0.0.1 addresses (host:port) whose
// ports were free a moment ago, for servers that must know their peers'
// addresses before any of them listens, or that restart on the same
// address.
//
// The ports come from below the kernel's ephemeral range (on Linux,
// /proc/sys/net/ipv4/ip_local_port_range; 32768 when it cannot be read).
// A port picked from inside it, as "127.0.0.1:0" picks, can be taken as
// the source port of any outgoing connection between the pick and the
// server's bind, or while the server is down for a restart; seen as
// "bind: address already in use" when a cluster node's own peers had
// connected from it. Each port is held until all are picked, so no two
// are the same. It fails the test if n ports cannot be found.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports of 127.0.0.1 in [%d, %d)", n, lo, hi)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		held = append(held, l)
		out = append(out, addr)
	}
	return out
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 11000 {
		return fallback
	}
	return p
}
