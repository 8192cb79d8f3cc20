package natsbench

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startServer runs a JetStream server in process on a free port of
// 127.0.0.1, its store in a temporary directory.
func startServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server not ready in 30s")
	}
	t.Cleanup(s.Shutdown)
	return s.Addr().String()
}

// newStream creates a stream on the test's server, trying again when the
// server fails to create the stream's file store: an embedded
// nats-server under the race detector, beside other packages' tests, has
// failed that once (err_code 10049, "error creating store for stream"),
// which is the server's own trouble, not the driver's.
func newStream(t *testing.T, ctx context.Context, addr, name string) (*Stream, error) {
	t.Helper()
	for try := 1; ; try++ {
		s, err := NewStream(ctx, addr, name, 1)
		if err == nil || try == 3 || !strings.Contains(err.Error(), "error creating store for stream") {
			return s, err
		}
		t.Logf("try %d: %v; trying again", try, err)
		time.Sleep(time.Second)
	}
}

// TestWorkloads runs each workload at a tiny size and checks the counts;
// nothing about speed.
func TestWorkloads(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s, err := newStream(t, ctx, addr, Name(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Produce(ctx, s, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500})
	if err != nil {
		t.Fatal(err)
	}
	if p.Messages != 500 || p.Elapsed <= 0 {
		t.Errorf("Produce(count 500) = %d messages in %v; want 500", p.Messages, p.Elapsed)
	}
	if n, err := s.Pending(ctx); err != nil || n != 500 {
		t.Errorf("Pending() = %d, %v; want 500", n, err)
	}
	c, err := Consume(ctx, s, 2, 64, 500)
	if err != nil {
		t.Fatal(err)
	}
	if c.Messages != 500 {
		t.Errorf("Consume(500) = %d messages; want 500", c.Messages)
	}
	// Acks are not confirmed: wait for the work queue to empty.
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := s.Pending(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Pending() after Consume = %d, %v; want 0", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	s, err = newStream(t, ctx, addr, Name(2))
	if err != nil {
		t.Fatal(err)
	}
	l, err := MeasureLatency(ctx, s, 16, 10, 200, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.Unloaded.Count != 10 || l.Loaded.Count != 50 {
		t.Errorf("MeasureLatency = %d unloaded, %d loaded samples; want 10, 50", l.Unloaded.Count, l.Loaded.Count)
	}
	for _, lat := range []Latency{l.Unloaded, l.Loaded} {
		if !(0 < lat.P50 && lat.P50 <= lat.P95 && lat.P95 <= lat.P99 && lat.P99 <= lat.Max) {
			t.Errorf("MeasureLatency percentiles = %+v; want 0 < p50 ≤ p95 ≤ p99 ≤ max", lat)
		}
	}
}

// startCluster runs a JetStream cluster of n servers in process, named
// n1 to nn, on free ports of 127.0.0.1, and returns their client
// addresses, comma-separated.
func startCluster(t *testing.T, n int) string {
	t.Helper()
	routes := make([]*url.URL, n)
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	var addrs []string
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatal("nats-server not ready in 30s")
		}
		t.Cleanup(s.Shutdown)
		addrs = append(addrs, s.Addr().String())
	}
	return strings.Join(addrs, ",")
}

// TestCluster creates a stream with three replicas on a cluster as soon
// as its servers accept connections, checks that its clients go to its
// leader, and runs the lifecycle and latency workloads on it at a tiny
// size. It is skipped under -short.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: a JetStream cluster takes seconds to elect its leaders")
	}
	addrs := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s, err := NewStream(ctx, addrs, Name(1), 3)
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := connect(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader != nc.ConnectedServerName() {
		t.Errorf("stream: %d replicas, cluster %+v, clients on %s; want 3 replicas and clients on the leader",
			info.Config.Replicas, info.Cluster, nc.ConnectedServerName())
	}
	nc.Close()

	r, err := Lifecycle(ctx, s, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Produce.Messages != 500 || r.Consume.Messages != 500 || r.Consume.Elapsed <= 0 {
		t.Errorf("Lifecycle(count 500) = %+v; want 500 produced, 500 consumed", r)
	}
	d, err := Lifecycle(ctx, s, ProduceSpec{Producers: 1, Outstanding: 8, Size: 64, Duration: 100 * time.Millisecond}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if d.Produce.Messages <= 0 || d.Consume.Messages < d.Produce.Messages {
		t.Errorf("Lifecycle(100ms) = %+v; want every message produced consumed", d)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	// A work-queue stream takes one consumer: the latency workload gets
	// a stream of its own.
	s, err = NewStream(ctx, addrs, Name(2), 3)
	if err != nil {
		t.Fatal(err)
	}
	l, err := MeasureLatency(ctx, s, 16, 10, 200, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.Unloaded.Count != 10 || l.Loaded.Count != 20 {
		t.Errorf("MeasureLatency = %d unloaded, %d loaded samples; want 10, 20", l.Unloaded.Count, l.Loaded.Count)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}
