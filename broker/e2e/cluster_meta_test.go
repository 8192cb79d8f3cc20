package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestClusterMetaSnapshot: with the meta group's log compacted every few
// entries, a node that was down while queues were created and deleted, a
// runtime config key was set and an API key was minted, gets a snapshot
// of the meta group when it comes back; on that node alone, the new key
// authenticates, the config key reads back, and the queues are those of
// the others. The runtime config holds only what users set.
func TestClusterMetaSnapshot(t *testing.T) {
	env := append(slices.Clone(clusterEnv), "FILA_CLUSTER_META_SNAPSHOT_ENTRIES=4",
		"FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+bootstrap)
	c := filatest.StartCluster(t, 3, filatest.WithEnv(env...))
	ctx := ctxT(t, 2*time.Minute)
	root, err := connectKey(t, c.Addrs(), bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	admin := root.Admin()
	createQueue(t, ctx, admin, "before")
	c.Nodes[2].Kill()
	for i := range 6 {
		createQueue(t, ctx, admin, fmt.Sprintf("q%d", i))
	}
	for _, q := range []string{"before", "q0", "q1", "q2"} {
		if err := admin.DeleteQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.SetConfig(ctx, "tenant.limit", "7"); err != nil {
		t.Fatal(err)
	}
	key, err := admin.CreateAPIKey(ctx, fila.NewAPIKeySpec("late").Permissions(fila.Admin("*")))
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes[2].Restart(t)

	// Node 3 alone, with the key minted while it was down.
	var third *fila.Client
	var last error
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		third, last = fila.Connect(cctx, c.Nodes[2].Addr, fila.WithAPIKey(key.Secret))
		cancel()
		if last == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if third == nil {
		t.Fatalf("node 3 never accepted the key minted while it was down: %v", last)
	}
	defer third.Close()
	v, found, err := third.Admin().GetConfig(ctx, "tenant.limit")
	if err != nil || !found || v != "7" {
		t.Fatalf("node 3: tenant.limit = %q, %v, %v; want 7", v, found, err)
	}
	entries, err := third.Admin().ListConfig(ctx, "")
	if err != nil || len(entries) != 1 {
		t.Fatalf("node 3: runtime config %+v, %v; want only tenant.limit", entries, err)
	}
	queues, err := third.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range queues {
		names = append(names, q.Name)
	}
	slices.Sort(names)
	if want := []string{"q3", "q3.dlq", "q4", "q4.dlq", "q5", "q5.dlq"}; !slices.Equal(names, want) {
		t.Fatalf("node 3 lists queues %v; want %v", names, want)
	}
	if !strings.Contains(c.Nodes[2].Log(), "installed a snapshot of the meta group") {
		t.Fatal("node 3 caught up without a snapshot of the meta group: the test does not test it")
	}
}
