package server

import (
	"container/list"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// admission decides which connections the server takes and keeps, so
// that sockets which never complete a handshake cannot lock real clients
// out, and one address cannot take every connection or guess keys at the
// speed of the network:
//
//   - A connection is handshaking from accept until HandshakeOk. At most
//     maxHandshaking are; admitting one more closes the oldest. A real
//     client handshakes within a round trip, so a flood of idle sockets
//     can delay it only by outpacing that round trip maxHandshaking times.
//   - maxEstablished (server.max_connections) counts connections that
//     completed the handshake; it is checked at handshake.
//   - Per address (an IPv4 address, or an IPv6 /64, the block one host
//     usually holds), at most perAddress connections are open, and
//     failed handshakes take tokens from a bucket of rate tokens a second,
//     burst deep. While the bucket is empty, the address's connections are
//     refused at accept, before a byte is read.
//
// The table of addresses holds an entry per address with open connections
// (bounded by the connection limits) plus at most maxIdleAddrs entries of
// addresses whose bucket is refilling; past that the oldest-refilled idle
// entries are forgotten, so many addresses cannot grow it without bound.
type admission struct {
	maxHandshaking int
	maxEstablished int // 0: no limit
	perAddress     int // 0: no limit
	rate, burst    float64
	now            func() time.Time

	mu          sync.Mutex
	handshaking list.List // of *conn, oldest first
	established int
	addrs       map[netip.Prefix]*addrState
	idle        int // entries of addrs with no connection
}

// maxIdleAddrs bounds the addresses remembered only for their failures.
const maxIdleAddrs = 4096

// addrState is what admission knows of one address.
type addrState struct {
	conns  int
	tokens float64   // failed handshakes still allowed, as of at; below 0 while in debt
	at     time.Time // when tokens was last brought up to date
}

func newAdmission(cfg *Config) *admission {
	return &admission{
		maxHandshaking: cfg.MaxHandshaking,
		maxEstablished: cfg.MaxConnections,
		perAddress:     cfg.MaxConnectionsPerAddress,
		rate:           cfg.HandshakeFailureRate,
		burst:          float64(cfg.HandshakeFailureBurst),
		now:            time.Now,
		addrs:          map[netip.Prefix]*addrState{},
	}
}

// addrKey returns the address a connection's limits are kept under: its
// IPv4 address, or its IPv6 /64; ok is false for a remote address that is
// not IP (no per-address limits apply).
func addrKey(a net.Addr) (netip.Prefix, bool) {
	ta, isTCP := a.(*net.TCPAddr)
	if !isTCP {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// refill brings st's bucket up to now. Runs under mu.
func (a *admission) refill(st *addrState, now time.Time) {
	if a.rate <= 0 {
		return
	}
	if d := now.Sub(st.at); d > 0 {
		st.tokens = min(a.burst, st.tokens+d.Seconds()*a.rate)
	}
	st.at = now
}

// precheck returns why a connection from addr would be refused at accept
// (its failed-handshake bucket is empty, or it has too many connections
// open), or "". It registers nothing: the accept loop calls it before it
// builds a connection, so a refused socket costs no more than its accept,
// and admit checks again.
func (a *admission) precheck(addr netip.Prefix) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.addrs[addr]
	if st == nil {
		return ""
	}
	return a.refusalLocked(addr, st)
}

// refusalLocked is why a connection from addr, whose state is st, is
// refused at accept, or "". Runs under mu.
func (a *admission) refusalLocked(addr netip.Prefix, st *addrState) string {
	a.refill(st, a.now())
	if a.rate > 0 && st.tokens < 1 {
		return fmt.Sprintf("too many failed handshakes from %s (at most %g a second): retry later", addr, a.rate)
	}
	if a.perAddress > 0 && st.conns >= a.perAddress {
		return fmt.Sprintf("more than %d connections from %s", a.perAddress, addr)
	}
	return ""
}

// admit takes a connection just accepted. It returns why the connection
// is refused (it then counts for nothing), or "" and, when the
// handshaking pool was full, the oldest handshaking connection, which the
// caller closes.
func (a *admission) admit(c *conn) (refusal string, evict *conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.hasAddr {
		st := a.addrs[c.addr]
		if st != nil {
			if r := a.refusalLocked(c.addr, st); r != "" {
				return r, nil
			}
		} else {
			st = &addrState{tokens: a.burst, at: a.now()}
			a.addrs[c.addr] = st
			a.idle++
		}
		if st.conns == 0 {
			a.idle--
		}
		st.conns++
	}
	c.admitted = a.handshaking.PushBack(c)
	if a.maxHandshaking > 0 && a.handshaking.Len() > a.maxHandshaking {
		oldest := a.handshaking.Front()
		a.handshaking.Remove(oldest)
		evict = oldest.Value.(*conn)
		evict.admitted = nil
		evict.evicted = true
	}
	return "", evict
}

// handshaken moves c from the handshaking pool to the established
// connections. It returns why c may not stay: it was evicted meanwhile, or
// the established connections are at server.max_connections.
func (a *admission) handshaken(c *conn) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.evicted {
		return "evicted while handshaking: too many connections waiting for a handshake"
	}
	if c.admitted != nil {
		a.handshaking.Remove(c.admitted)
		c.admitted = nil
	}
	if a.maxEstablished > 0 && a.established >= a.maxEstablished {
		return fmt.Sprintf("more than %d connections", a.maxEstablished)
	}
	a.established++
	c.established = true
	return ""
}

// failed charges a failed handshake of c to its address's bucket. The
// bucket may go below zero: a socket evicted from the handshaking pool is
// charged when it is evicted, which is long after its address was
// admitted, often while the address's bucket is already empty; forgiving
// that debt would let a flood from a few addresses through at the rate of
// the pool's turnover instead of handshake_failure_rate.
func (a *admission) failed(c *conn) {
	if !c.hasAddr || a.rate <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.addrs[c.addr]; st != nil {
		a.refill(st, a.now())
		st.tokens--
	}
}

// closed forgets c.
func (a *admission) closed(c *conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.admitted != nil {
		a.handshaking.Remove(c.admitted)
		c.admitted = nil
	}
	if c.established {
		a.established--
		c.established = false
	}
	if !c.hasAddr {
		return
	}
	st := a.addrs[c.addr]
	if st == nil {
		return
	}
	st.conns--
	if st.conns > 0 {
		return
	}
	a.refill(st, a.now())
	if a.rate <= 0 || st.tokens >= a.burst {
		delete(a.addrs, c.addr) // nothing to remember
		return
	}
	a.idle++
	if a.idle > maxIdleAddrs {
		a.sweep()
	}
}

// sweep forgets idle addresses: first those whose bucket has refilled,
// then, if that is not enough, any, down to half of maxIdleAddrs. Runs
// under mu.
func (a *admission) sweep() {
	now := a.now()
	for k, st := range a.addrs {
		if st.conns > 0 {
			continue
		}
		a.refill(st, now)
		if st.tokens >= a.burst {
			delete(a.addrs, k)
			a.idle--
		}
	}
	for k, st := range a.addrs {
		if a.idle <= maxIdleAddrs/2 {
			break
		}
		if st.conns == 0 {
			delete(a.addrs, k)
			a.idle--
		}
	}
}

// counts returns the handshaking and established connections and the
// addresses known, for tests.
func (a *admission) counts() (handshaking, established, addrs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handshaking.Len(), a.established, len(a.addrs)
}
