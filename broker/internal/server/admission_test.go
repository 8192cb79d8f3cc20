package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// fakeConn returns a connection from addr, as the accept loop makes it.
func fakeConn(t *testing.T, addr string) *conn {
	t.Helper()
	c := &conn{}
	ap := netip.MustParseAddrPort(addr)
	c.addr, c.hasAddr = addrKey(net.TCPAddrFromAddrPort(ap))
	return c
}

func testAdmission(cfg Config) (*admission, *time.Time) {
	now := time.Unix(1000, 0)
	a := newAdmission(&cfg)
	a.now = func() time.Time { return now }
	return a, &now
}

func TestAddrKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.2:5000", "127.0.0.2/32"},
		{"[::ffff:10.0.0.1]:5000", "10.0.0.1/32"},
		{"[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::/64"},
	} {
		c := fakeConn(t, tc.addr)
		if !c.hasAddr || c.addr.String() != tc.want {
			t.Errorf("addrKey(%s) = %v, %v; want %s", tc.addr, c.addr, c.hasAddr, tc.want)
		}
	}
	if _, ok := addrKey(&net.UnixAddr{Name: "/tmp/s"}); ok {
		t.Errorf("addrKey(unix) is ok; want no per-address limits")
	}
}

// TestHandshakingPoolEvictsOldest: the pool of connections still
// handshaking never refuses a newcomer; it closes the oldest instead.
func TestHandshakingPoolEvictsOldest(t *testing.T) {
	a, _ := testAdmission(Config{MaxHandshaking: 3})
	var cs []*conn
	for i := range 5 {
		c := fakeConn(t, fmt.Sprintf("10.0.0.1:%d", 1000+i))
		refusal, evict := a.admit(c)
		if refusal != "" {
			t.Fatalf("admit %d refused: %s", i, refusal)
		}
		switch {
		case i < 3 && evict != nil:
			t.Fatalf("admit %d evicted with room in the pool", i)
		case i >= 3 && evict != cs[i-3]:
			t.Fatalf("admit %d evicted %p; want the oldest, %p", i, evict, cs[i-3])
		}
		cs = append(cs, c)
	}
	if r := a.handshaken(cs[0]); !strings.Contains(r, "evicted") {
		t.Errorf("handshaken(evicted) = %q; want a refusal", r)
	}
	if r := a.handshaken(cs[4]); r != "" {
		t.Errorf("handshaken(newest) = %q", r)
	}
	if h, e, _ := a.counts(); h != 2 || e != 1 {
		t.Errorf("handshaking, established = %d, %d; want 2, 1", h, e)
	}
	for _, c := range cs {
		a.closed(c)
	}
	if h, e, n := a.counts(); h != 0 || e != 0 || n != 0 {
		t.Errorf("after every close: handshaking %d, established %d, addresses %d; want 0", h, e, n)
	}
}

// TestMaxConnectionsCountsEstablished: server.max_connections is checked
// at handshake, against handshaken connections only.
func TestMaxConnectionsCountsEstablished(t *testing.T) {
	a, _ := testAdmission(Config{MaxHandshaking: 100, MaxConnections: 2})
	var cs []*conn
	for i := range 4 {
		c := fakeConn(t, fmt.Sprintf("10.0.0.1:%d", 2000+i))
		if r, _ := a.admit(c); r != "" {
			t.Fatalf("admit %d refused: %s", i, r)
		}
		cs = append(cs, c)
	}
	if a.handshaken(cs[0]) != "" || a.handshaken(cs[1]) != "" {
		t.Fatal("first two handshakes refused")
	}
	if r := a.handshaken(cs[2]); !strings.Contains(r, "more than 2 connections") {
		t.Fatalf("third handshake = %q; want refused", r)
	}
	a.closed(cs[2])
	a.closed(cs[0])
	if r := a.handshaken(cs[3]); r != "" {
		t.Fatalf("handshake after a close = %q", r)
	}
}

func TestConnectionsPerAddress(t *testing.T) {
	a, _ := testAdmission(Config{MaxHandshaking: 100, MaxConnectionsPerAddress: 2})
	c1, c2 := fakeConn(t, "10.0.0.1:1"), fakeConn(t, "10.0.0.1:2")
	a.admit(c1)
	a.admit(c2)
	if r, _ := a.admit(fakeConn(t, "10.0.0.1:3")); !strings.Contains(r, "more than 2 connections from 10.0.0.1") {
		t.Fatalf("third from one address = %q; want refused", r)
	}
	if r, _ := a.admit(fakeConn(t, "10.0.0.2:3")); r != "" {
		t.Fatalf("another address refused: %s", r)
	}
	a.closed(c1)
	if r, _ := a.admit(fakeConn(t, "10.0.0.1:4")); r != "" {
		t.Fatalf("after a close: %s", r)
	}
}

// TestHandshakeFailureBucket: an address may fail burst handshakes, then
// rate a second; while its bucket is empty its connections are refused,
// and other addresses are not affected.
func TestHandshakeFailureBucket(t *testing.T) {
	a, now := testAdmission(Config{MaxHandshaking: 100, HandshakeFailureRate: 2, HandshakeFailureBurst: 3})
	attempt := func(addr string) (refused bool) {
		c := fakeConn(t, addr)
		if r, _ := a.admit(c); r != "" {
			return true
		}
		a.failed(c)
		a.closed(c)
		return false
	}
	for i := range 3 {
		if attempt("10.0.0.1:1") {
			t.Fatalf("attempt %d refused within the burst", i)
		}
	}
	if !attempt("10.0.0.1:1") {
		t.Fatal("attempt after the burst admitted; want refused")
	}
	if attempt("10.0.0.2:1") {
		t.Fatal("another address refused")
	}
	*now = now.Add(500 * time.Millisecond) // one token at 2 a second
	if attempt("10.0.0.1:1") {
		t.Fatal("refused after a token refilled")
	}
	if !attempt("10.0.0.1:1") {
		t.Fatal("admitted with the bucket empty again")
	}
	// A successful handshake costs nothing.
	*now = now.Add(time.Hour)
	for range 10 {
		c := fakeConn(t, "10.0.0.1:1")
		if r, _ := a.admit(c); r != "" {
			t.Fatalf("refused: %s", r)
		}
		a.handshaken(c)
		a.closed(c)
	}
}

// TestAddressTableBounded: addresses that failed and left are
// remembered, but never more than maxIdleAddrs of them.
func TestAddressTableBounded(t *testing.T) {
	a, _ := testAdmission(Config{MaxHandshaking: 100, HandshakeFailureRate: 1, HandshakeFailureBurst: 5})
	for i := range 3 * maxIdleAddrs {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		c := fakeConn(t, netip.AddrPortFrom(ip, 1).String())
		a.admit(c)
		a.failed(c)
		a.closed(c)
		if _, _, n := a.counts(); n > maxIdleAddrs {
			t.Fatalf("after %d addresses the table holds %d; want at most %d", i+1, n, maxIdleAddrs)
		}
	}
}

// TestEvictionChargesAreNotForgiven: sockets that never handshake, from
// four addresses, keep the handshaking pool full for 20 simulated
// seconds; the first address's sockets fill the pool first. Each socket
// evicted is charged to its own address, often one whose bucket is
// already empty; the charge must stand (the bucket goes into debt), or
// the other addresses are let in at the pool's turnover rate (16,708
// admissions here, when it was forgiven). Admissions stay within twice
// what the buckets allow (burst and rate per address over the time, plus
// the pool): a charge comes one pool's turnover after its admission, so
// an address may be let in for that long past its last token.
func TestEvictionChargesAreNotForgiven(t *testing.T) {
	const pool, rate, burst, secs = 64, 10, 20, 20
	a, now := testAdmission(Config{MaxHandshaking: pool, HandshakeFailureRate: rate, HandshakeFailureBurst: burst})
	addrs := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	admitted := 0
	try := func(addr string, port int) {
		c := fakeConn(t, fmt.Sprintf("%s:%d", addr, port))
		refusal, evict := a.admit(c)
		if refusal != "" {
			return
		}
		admitted++
		if evict != nil {
			a.failed(evict)
			a.closed(evict)
		}
	}
	for i := range pool {
		try(addrs[0], 1000+i)
	}
	for i := range secs * 4000 {
		*now = now.Add(250 * time.Microsecond)
		try(addrs[1+i%3], 2000+i%50000)
		if i%50 == 0 {
			try(addrs[0], 1000+i%50000)
		}
	}
	if most := 2 * (pool + len(addrs)*(burst+rate*secs)); admitted > most {
		t.Errorf("admitted %d sockets that never handshook in %ds; want at most %d", admitted, secs, most)
	}
}

// TestRefusalsPaced: the accept loop refuses at most Config.RefusalRate
// connections a second (burst as many); the rest of a flood waits in the
// listen backlog, unanswered, instead of costing the broker a refusal
// each. The bound is an upper one: a slow machine only refuses fewer.
func TestRefusalsPaced(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sh, err := shard.Open(shard.Config{Logger: log}, store.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{NodeID: "test", Logger: log, MaxConnectionsPerAddress: 1, RefusalRate: 5}, node.New(node.Config{NodeID: "test", Logger: log}, sh))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		sh.Close()
	})
	// The one connection 127.0.0.9 may have; every later one is refused.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
	first, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	start := time.Now()
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		nc, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nc.Close()
			nc.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
			if b, _ := io.ReadAll(nc); strings.Contains(string(b), "more than 1 connections") {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if most := 5 + int64(5*elapsed.Seconds()) + 1; refused.Load() > most {
		t.Errorf("%d of 40 connections refused in %v; want at most %d at 5 a second, burst 5", refused.Load(), elapsed, most)
	}
	if refused.Load() == 0 {
		t.Errorf("no connection refused in %v", elapsed)
	}
}
