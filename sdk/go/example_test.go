package fila_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

// The examples find a broker at $FILA_ADDR, as the fila CLI does, or on
// the default port of this machine.

// The whole round trip: create a queue, enqueue, consume, ack.
func Example() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec("hello")); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Enqueue(ctx, "hello", []byte("hello, fila")); err != nil {
		log.Fatal(err)
	}
	sub, err := client.Consumer().Subscribe(ctx, "hello")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (attempt %d)\n", d.Payload(), d.Attempt())
		if err := d.Ack(ctx); err != nil {
			log.Fatal(err)
		}
		break
	}
	// Output: hello, fila (attempt 1)
}

// A message carries its scheduling: fairness key and weight for DRR,
// throttle keys for token buckets, a delay, an idempotency key.
func ExampleProducer_Send() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("payments"))

	p := client.Producer()
	msg := fila.NewMessage("payments", []byte(`{"amount": 4200}`)).
		Header("tenant", "acme").
		FairnessKey("acme").
		Weight(3).
		ThrottleKey("provider:stripe").
		IdempotencyKey("payment-7781")
	first, err := p.Send(ctx, msg)
	if err != nil {
		log.Fatal(err)
	}
	// The same idempotency key within the dedup window is not enqueued
	// again: the first message's ID comes back.
	again, err := p.Send(ctx, fila.NewMessage("payments", []byte(`{"amount": 4200}`)).IdempotencyKey("payment-7781"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deduplicated:", first == again)

	// An unknown queue is the operation's own error type, and matches its
	// sentinel.
	_, err = p.Enqueue(ctx, "no-such-queue", []byte("x"))
	var e *fila.EnqueueError
	fmt.Println(errors.As(err, &e), e.Code, errors.Is(err, fila.ErrQueueNotFound))
	// Output:
	// deduplicated: true
	// true QUEUE_NOT_FOUND true
}

// Concurrent Sends are coalesced into batch frames; SendBatch sends an
// explicit batch, with one result per message.
func ExampleProducer_SendBatch() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("emails"))

	results, err := client.Producer().SendBatch(ctx, []*fila.Message{
		fila.NewMessage("emails", []byte("welcome")).FairnessKey("tenant-a"),
		fila.NewMessage("nowhere", []byte("lost")),
		fila.NewMessage("emails", []byte("receipt")).FairnessKey("tenant-b").Delay(time.Minute),
	})
	if err != nil {
		log.Fatal(err) // the whole batch failed
	}
	for i, r := range results {
		if r.Err != nil {
			fmt.Println(i, "failed:", errors.Is(r.Err, fila.ErrQueueNotFound))
			continue
		}
		fmt.Println(i, "enqueued")
	}
	// Output:
	// 0 enqueued
	// 1 failed: true
	// 2 enqueued
}

// A worker ranges over its subscription; Prefetch bounds how many
// deliveries it holds unsettled.
func ExampleConsumer_Subscribe() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("thumbnails").MaxAttempts(2).Backoff(time.Millisecond, time.Millisecond))
	for _, img := range []string{"cat.png", "corrupt.png"} {
		if _, err := client.Producer().Enqueue(ctx, "thumbnails", []byte(img)); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := client.Consumer().Subscribe(ctx, "thumbnails", fila.Prefetch(10))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	seen := 0
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s attempt %d\n", d.Payload(), d.Attempt())
		if string(d.Payload()) == "corrupt.png" {
			// Failed: the queue's policy retries, then dead-letters.
			d.Nack(ctx, "cannot decode image")
		} else {
			d.Ack(ctx)
		}
		if seen++; seen == 3 {
			break
		}
	}
	// Output:
	// cat.png attempt 1
	// corrupt.png attempt 1
	// corrupt.png attempt 2
}

// A subscription is also a channel, for select loops.
func ExampleSubscription_C() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("ticks"))
	client.Producer().Enqueue(ctx, "ticks", []byte("tick"))

	sub, err := client.Consumer().Subscribe(ctx, "ticks")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	select {
	case d, ok := <-sub.C():
		if !ok {
			log.Fatal(sub.Err())
		}
		fmt.Println(string(d.Payload()))
		d.Ack(ctx)
	case <-time.After(time.Minute):
		fmt.Println("nothing")
	}
	// Output: tick
}

// Deliveries gathered from several workers are acked in one request.
func ExampleConsumer_AckAll() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("events"))
	for i := range 5 {
		client.Producer().Enqueue(ctx, "events", fmt.Appendf(nil, "event-%d", i))
	}

	sub, err := client.Consumer().Subscribe(ctx, "events")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	var (
		mu   sync.Mutex
		done []*fila.Delivery
		wg   sync.WaitGroup
	)
	for range 5 {
		d, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() { // process concurrently
			defer wg.Done()
			mu.Lock()
			done = append(done, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := client.Consumer().AckAll(ctx, done); err != nil {
		log.Fatal(err)
	}
	fmt.Println("acked", len(done))
	// Output: acked 5
}

// Admin manages queues and runtime config: here a queue with a Lua
// on_enqueue hook, and a rate limit its messages share.
func ExampleAdministrator() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	spec := fila.NewQueueSpec("webhooks").
		VisibilityTimeout(30 * time.Second).
		MaxAttempts(5).
		OnEnqueue(`function on_enqueue(msg)
			return { fairness_key = msg.headers["tenant"] or "anonymous",
			         throttle_keys = { "webhooks" } }
		end`)
	if err := admin.CreateQueue(ctx, spec); err != nil {
		log.Fatal(err)
	}
	// 50 deliveries per second, bursts of 100, for every queue whose
	// messages carry the throttle key "webhooks".
	if err := admin.SetConfig(ctx, "throttle.webhooks", "50,100"); err != nil {
		log.Fatal(err)
	}
	client.Producer().Send(ctx, fila.NewMessage("webhooks", []byte("{}")).Header("tenant", "acme"))

	st, err := admin.QueueStats(ctx, "webhooks")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready:", st.Ready, "key:", st.FairnessKeys[0].Key)
	limits, _ := admin.ListConfig(ctx, "throttle.")
	for _, e := range limits {
		fmt.Println(e.Key, "=", e.Value)
	}
	queues, _ := admin.ListQueues(ctx)
	var names []string
	for _, q := range queues {
		if q.Name == "webhooks" || q.Parent == "webhooks" {
			names = append(names, q.Name)
		}
	}
	sort.Strings(names)
	fmt.Println(names)
	// Output:
	// ready: 1 key: acme
	// throttle.webhooks = 50,100
	// [webhooks webhooks.dlq]
}

// Dead-lettered messages are redriven to their queue once the cause is
// fixed.
func ExampleAdministrator_Redrive() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	client.Admin().CreateQueue(ctx, fila.NewQueueSpec("invoices").MaxAttempts(1))
	client.Producer().Enqueue(ctx, "invoices", []byte("INV-1"))
	sub, _ := client.Consumer().Subscribe(ctx, "invoices")
	d, _ := sub.Next(ctx)
	d.Nack(ctx, "pdf service down") // one attempt: straight to invoices.dlq

	moved, err := client.Admin().Redrive(ctx, "invoices.dlq", 0)
	if err != nil {
		log.Fatal(err)
	}
	d, _ = sub.Next(ctx)
	fmt.Println("moved", moved, "→", string(d.Payload()), "attempt", d.Attempt())
	d.Ack(ctx)
	sub.Close(ctx)
	// Output: moved 1 → INV-1 attempt 1
}

// API keys and ACLs (needs a broker with [auth] enabled and an admin
// key). Permissions are typed: an invalid kind does not compile.
func ExampleAdministrator_CreateAPIKey() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	key, err := admin.CreateAPIKey(ctx, fila.NewAPIKeySpec("checkout-service").
		Permissions(fila.Produce("orders.*"), fila.Consume("orders.eu")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("key", key.ID, "secret (shown once):", key.Secret)
	if err := admin.SetACL(ctx, key.ID, fila.Produce("orders.*"), fila.Admin("orders.*")); err != nil {
		log.Fatal(err)
	}
	perms, _ := admin.GetACL(ctx, key.ID)
	fmt.Println(perms)
}

// Moving a queue's replicas to other nodes of a cluster (needs a broker
// in a cluster, and an admin key on "*"): the call returns once the plan
// is recorded; the move runs in the background, and ClusterStatus shows
// it under way until the group has no Target and no learner left.
func ExampleAdministrator_MoveQueue() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	if err := admin.MoveQueue(ctx, "orders", 2, 3, 4); err != nil {
		log.Fatal(err) // *fila.MoveQueueError for a missing queue, NOT_SUPPORTED on a single node
	}
	// The node the client reached first answers ClusterStatus with its
	// own view; `fila cluster move --wait` asks every node.
	for range 600 {
		st, err := admin.ClusterStatus(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, g := range st.Groups {
			if g.Queue != "orders" {
				continue
			}
			learners := 0
			for _, r := range g.Replicas {
				if r.Learner {
					learners++
				}
			}
			fmt.Println("replicas", len(g.Replicas), "learners", learners, "target", g.Target)
			if len(g.Target) == 0 && learners == 0 {
				return
			}
		}
		time.Sleep(time.Second)
	}
	log.Fatal("orders is still moving after 10 minutes")
}

// Draining node 3 of a cluster before taking it out of service (needs a
// broker in a cluster, and an admin key on "*"): the call returns the
// number of queues whose move off the node it planned; the moves run in
// the background, and ClusterStatus shows the node draining until it
// holds no replica, then drained.
func ExampleAdministrator_DrainNode() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	queues, err := admin.DrainNode(ctx, 3)
	if err != nil {
		log.Fatal(err) // NOT_SUPPORTED on a single node, INVALID_ARGUMENT for a node that is not a member
	}
	fmt.Println("moving", queues, "queues off node 3")
	// The node the client reached first answers with its own view;
	// `fila cluster drain --wait` asks every node.
	for range 600 {
		st, err := admin.ClusterStatus(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, n := range st.Nodes {
			if n.ID == 3 && n.State == fila.NodeDrained {
				fmt.Println("node 3 is drained")
				return
			}
		}
		time.Sleep(time.Second)
	}
	log.Fatal("node 3 is still draining after 10 minutes")
}

// Putting a drained node back into service: it takes new replicas
// again. The queues moved off it stay where they are; MoveQueue moves
// one back.
func ExampleAdministrator_UndrainNode() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if err := client.Admin().UndrainNode(ctx, 3); err != nil {
		log.Fatal(err)
	}
}

// Even out a cluster after adding a node: a dry run first, then the plan.
func ExampleAdministrator_Rebalance() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	plan, err := admin.Rebalance(ctx, true)
	if err != nil {
		log.Fatal(err) // NOT_SUPPORTED on a single node
	}
	for _, m := range plan.Moves {
		fmt.Printf("%s: node %d -> node %d\n", m.Queue, m.From, m.To)
	}
	if len(plan.Moves) == 0 && len(plan.Leads) == 0 {
		fmt.Println("balanced")
		return
	}
	if _, err := admin.Rebalance(ctx, false); err != nil {
		log.Fatal(err)
	}
}

// Replace node 3 by node 4: add the new node (started with
// FILA_CLUSTER_JOIN=true), drain the old one, then remove it.
func ExampleAdministrator_AddNode() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr, fila.WithAPIKey(os.Getenv("FILA_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	admin := client.Admin()

	if err := admin.AddNode(ctx, 4, "10.0.0.4:5556"); err != nil {
		log.Fatal(err)
	}
	if _, err := admin.DrainNode(ctx, 3); err != nil {
		log.Fatal(err)
	}
	for drained := false; !drained; time.Sleep(time.Second) {
		st, err := admin.ClusterStatus(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, n := range st.Nodes {
			drained = drained || n.ID == 3 && n.State == fila.NodeDrained
		}
	}
	if err := admin.RemoveNode(ctx, 3); err != nil {
		log.Fatal(err)
	}
}
