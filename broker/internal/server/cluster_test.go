package server

import (
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/store"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// pipeClusterServer is pipeServer over a one-node cluster: requests are
// routed by queue through cluster.Node, as on every node of a cluster.
func pipeClusterServer(t *testing.T) (*Server, func() *pipeClient) {
	t.Helper()
	log, logged := pipeLog()
	peer := filatest.FreePorts(t, 1)[0]
	hooks := node.NewHooks(hook.Limits{}, nil, log)
	st := store.NewMem()
	cn, err := cluster.Open(cluster.Config{
		NodeID:         1,
		ClusterID:      "pipe",
		PeerListenAddr: peer,
		AdvertiseAddr:  "pipe",
		Peers:          map[uint64]string{1: peer},
		TickInterval:   10 * time.Millisecond,
		ElectionTicks:  10,
		HeartbeatTicks: 1,
		Effects:        node.ClusterEffects(hooks, nil, nil),
		Logger:         log,
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{NodeID: "pipe", Logger: log}, node.New(node.Config{NodeID: "pipe", Logger: log, Hooks: hooks, Cluster: cn}, nil))
	dial := servePipe(t, srv, logged, func() {
		cn.Close()
		st.Close()
	})
	return srv, dial
}

// TestUnsubscribeFromDeletedQueue: a client may unsubscribe while its
// queue is being deleted: in a cluster the queue leaves the node's routes
// before its replica ends the queue's subscriptions, so the Unsubscribe
// finds no queue. The subscription is closed either way, so the answer is
// UnsubscribeOk, not QUEUE_NOT_FOUND, which Unsubscribe does not declare.
func TestUnsubscribeFromDeletedQueue(t *testing.T) {
	srv, dial := pipeClusterServer(t)
	c := dial()
	c.handshake()
	c.send(2, &wire.CreateQueue{Name: "q"})
	expect[*wire.CreateQueueOk](c, 2)
	var id uint32 = 3
	for {
		// The queue's group elects its leader after CreateQueueOk.
		c.send(id, &wire.Subscribe{Queue: "q", Prefetch: 1})
		h, f, err := c.recv()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(*wire.SubscribeOk); ok && h.RequestID == id {
			break
		}
		if ef, ok := f.(*wire.ErrorFrame); !ok || ef.Code != wire.CodeNotLeader && ef.Code != wire.CodeUnavailable {
			t.Fatalf("Subscribe answered by %T %+v", f, f)
		}
		time.Sleep(20 * time.Millisecond)
		id++
	}

	// The moment between the queue's removal from the routes and the end
	// of its subscriptions: the connection's subscription names a queue
	// the node no longer routes.
	srv.mu.Lock()
	for sc := range srv.conns {
		sc.mu.Lock()
		if sub := sc.subs[id]; sub != nil {
			sub.queue = "deleted"
		}
		sc.mu.Unlock()
	}
	srv.mu.Unlock()

	c.send(id+1, &wire.Unsubscribe{Subscription: id})
	expect[*wire.UnsubscribeOk](c, id+1)
}
