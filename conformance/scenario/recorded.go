package scenario

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/fila-mq/fila/conformance"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// Broker configurations the scenarios share, so the broker-mode test
// starts one broker for each.
var (
	shortLease = []string{"FILA_QUEUE_VISIBILITY_TIMEOUT=1s"}
	smallFrame = []string{"FILA_SERVER_MAX_FRAME_SIZE=4KB", "FILA_SERVER_MAX_MESSAGE_SIZE=8KB"}
	brokerOnly = []string{"broker"}
	coreBroker = []string{"core", "broker"}
	authOn     = []string{"FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY=" + bootstrapKey}
	smallCap   = []string{"FILA_SERVER_MAX_UNSETTLED=2"}
)

// bootstrapKey is the bootstrap API key of the brokers started with auth
// on.
const bootstrapKey = "conformance-bootstrap-key"

// recorded are the scenarios recorded from a live broker.
var recorded = []conformance.Scenario{
	// ---- session: handshake, keepalive, leaving, connection errors ----
	{
		Name: "session/connect_ping_close",
		Doc: `A client connects, pings and leaves: Handshake, Ping answered by Pong,
and GoAway, which the broker answers with its own GoAway before closing.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			if _, err := c.Ping(ctx); err != nil {
				return err
			}
			return c.Close()
		},
	},
	{
		Name: "session/unsupported_version",
		Doc: `A Handshake offering only protocol version 9 gets UNSUPPORTED_VERSION,
and the broker closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.send(r.id(), &wire.Handshake{MaxVersion: 9, MinVersion: 9, ClientName: "fila-conformance"}); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeUnsupportedVersion), r.expectClose())
		},
	},
	{
		Name:    "session/frame_before_handshake",
		Doc:     `Any frame before the Handshake is a PROTOCOL_VIOLATION that closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.send(r.id(), &wire.Ping{Nonce: 1}); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeProtocolViolation), r.expectClose())
		},
	},
	{
		Name:    "session/second_handshake",
		Doc:     `A second Handshake on a connection is a PROTOCOL_VIOLATION that closes it.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.send(r.id(), &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "fila-conformance"}); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeProtocolViolation), r.expectClose())
		},
	},
	{
		Name: "session/unknown_opcode",
		Doc: `A request with an opcode the broker does not know gets UNKNOWN_OPCODE on
its request ID, and the connection stays open: a Ping after it is answered.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.raw(append(header(2, 0x0f01, r.id()), "hi"...)); err != nil {
				return err
			}
			if err := r.expectError(wire.CodeUnknownOpcode); err != nil {
				return err
			}
			if _, f, err := r.request(&wire.Ping{Nonce: 7}); err != nil || f.Opcode() != wire.OpPong {
				return fmt.Errorf("ping after an unknown opcode: %v %v", f, err)
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},
	{
		Name:    "session/request_id_zero",
		Doc:     `A request with request ID 0 is a PROTOCOL_VIOLATION that closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.send(0, &wire.Ping{Nonce: 1}); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeProtocolViolation), r.expectClose())
		},
	},
	{
		Name:    "session/response_from_client",
		Doc:     `A server-to-client frame (here EnqueueResult) sent by a client is a PROTOCOL_VIOLATION that closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.send(r.id(), &wire.EnqueueResult{}); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeProtocolViolation), r.expectClose())
		},
	},

	// ---- bad input ----
	{
		Name: "badinput/truncated_frame",
		Doc: `An Enqueue whose body ends inside its first message (the header's length
matches the short body) is MALFORMED_FRAME: the Error names the field, and
the broker closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			full := wire.AppendFrame(nil, r.id(), &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "bi.truncated", Payload: []byte("hello")}}})
			body := full[wire.HeaderSize : wire.HeaderSize+20]
			cut := append(header(uint32(len(body)), wire.OpEnqueue, 2), body...)
			if err := r.raw(cut); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeMalformedFrame), r.expectClose())
		},
	},
	{
		Name: "badinput/truncated_at_eof",
		Doc: `A client that half-closes the connection in the middle of a frame
header: the broker discards the partial frame and closes, without an Error.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.raw(wire.AppendFrame(nil, r.id(), &wire.Ping{Nonce: 1})[:7]); err != nil {
				return err
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},
	{
		Name: "badinput/oversized_frame",
		Doc: `A frame header announcing one byte more than the max frame size (16 MiB)
is FRAME_TOO_LARGE on request 0, before any of the body is read; the
broker closes the connection.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.raw(header(wire.DefaultMaxFrameSize+1, wire.OpEnqueue, r.id())); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeFrameTooLarge), r.expectClose())
		},
	},
	{
		Name: "badinput/garbage_first_bytes",
		Doc: `An HTTP request sent to the broker's port: its first four bytes, read
as a frame length, exceed the max frame size (64 KiB until the
handshake), so the broker answers FRAME_TOO_LARGE and closes.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.raw([]byte("GET / HTTP/1.1\r\nHost: fila\r\n\r\n")); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeFrameTooLarge), r.expectClose())
		},
	},
	{
		Name: "badinput/impossible_list_count",
		Doc: `An Enqueue whose message count could not fit in its body is
MALFORMED_FRAME before anything is allocated for it.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			body := []byte{0x00, 0x0f, 0x42, 0x40, 0, 0, 0, 0} // a million messages, four bytes
			if err := r.raw(append(header(uint32(len(body)), wire.OpEnqueue, r.id()), body...)); err != nil {
				return err
			}
			return firstErr(r.expectError(wire.CodeMalformedFrame), r.expectClose())
		},
	},
	{
		Name: "badinput/ack_unknown_id",
		Doc: `An Ack naming a message that was never delivered gets MESSAGE_NOT_FOUND
for that item, and QUEUE_NOT_FOUND for an item on a missing queue: per-item
results, the request itself succeeds.`,
		Targets: coreBroker,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if _, f, err := r.request(&wire.CreateQueue{Name: "bi.ack-unknown"}); err != nil || f.Opcode() != wire.OpCreateQueueOk {
				return fmt.Errorf("create queue: %v %v", f, err)
			}
			id := [16]byte{0x01, 0x93, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x01}
			_, f, err := r.request(&wire.Ack{Items: []wire.LeaseRef{
				{Queue: "bi.ack-unknown", ID: id, Lease: 7},
				{Queue: "bi.no-such-queue", ID: id, Lease: 7},
			}})
			if err != nil {
				return err
			}
			res, ok := f.(*wire.AckResult)
			if !ok || len(res.Results) != 2 || res.Results[0].Code != wire.CodeMessageNotFound || res.Results[1].Code != wire.CodeQueueNotFound {
				return fmt.Errorf("ack: got %+v", f)
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},
	{
		Name: "badinput/credit_unknown_subscription",
		Doc: `Credit for a subscription that is not open gets an Error
SUBSCRIPTION_NOT_FOUND on that subscription's ID; the connection stays open.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.send(0, &wire.Credit{Subscription: 9, Credits: 1}); err != nil {
				return err
			}
			if err := r.expectError(wire.CodeSubscriptionNotFound); err != nil {
				return err
			}
			if _, f, err := r.request(&wire.Ping{Nonce: 3}); err != nil || f.Opcode() != wire.OpPong {
				return fmt.Errorf("ping: %v %v", f, err)
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},
	{
		Name:    "badinput/unsubscribe_unknown",
		Doc:     `Unsubscribe of a subscription that is not open fails with SUBSCRIPTION_NOT_FOUND.`,
		Targets: brokerOnly,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if err := r.send(r.id(), &wire.Unsubscribe{Subscription: 5}); err != nil {
				return err
			}
			if err := r.expectError(wire.CodeSubscriptionNotFound); err != nil {
				return err
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},

	// ---- admin ----
	{
		Name: "admin/queue_lifecycle",
		Doc: `A queue's life: created (with its DLQ), created again (QUEUE_EXISTS),
listed, inspected before and after a message arrives, deleted, deleted
again and inspected (QUEUE_NOT_FOUND). ListQueues sees every queue, so the
broker must be fresh.`,
		Fresh: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a, q := c.Admin(), "adm.lifecycle"
			var st steps
			st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q).VisibilityTimeout(45*time.Second).MaxAttempts(5)), nil)
			st.want("create again", a.CreateQueue(ctx, fila.NewQueueSpec(q)), fila.ErrQueueExists)
			qs, err := a.ListQueues(ctx)
			st.want("list", err, nil)
			st.check("list", len(qs) == 2, "got %d queues; want the queue and its DLQ", len(qs))
			st.want("stats", second(a.QueueStats(ctx, q)), nil)
			st.want("send", second(c.Producer().Send(ctx, fila.NewMessage(q, []byte("hello")).FairnessKey("acme").Weight(2))), nil)
			st.want("stats after send", second(a.QueueStats(ctx, q)), nil)
			st.want("delete", a.DeleteQueue(ctx, q), nil)
			st.want("delete again", a.DeleteQueue(ctx, q), fila.ErrQueueNotFound)
			st.want("stats after delete", second(a.QueueStats(ctx, q)), fila.ErrQueueNotFound)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/tenants",
		Doc: `A queue with a tenant separator that charges by consumer time:
created without a policy (it is stfq), three messages of tenant acme
over two keys and one of tenant solo; QueueStats reports both settings,
and each key's entitled share is its tenant's half split among the
tenant's keys.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a, q := c.Admin(), "adm.tenants"
			var st steps
			st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q).TenantSeparator("/").CostByTime()), nil)
			for _, k := range []string{"acme/a", "acme/b", "acme/a", "solo"} {
				st.want("send "+k, second(c.Producer().Send(ctx, fila.NewMessage(q, []byte("x")).FairnessKey(k))), nil)
			}
			qs, err := a.QueueStats(ctx, q)
			st.want("stats", err, nil)
			if qs != nil {
				shares := map[string]float64{}
				for _, k := range qs.FairnessKeys {
					shares[k.Key] = k.EntitledShare
				}
				st.check("stats", qs.Policy == fila.PolicySTFQ && qs.TenantSeparator == "/" && qs.CostByTime &&
					shares["acme/a"] == 0.25 && shares["acme/b"] == 0.25 && shares["solo"] == 0.5,
					"got policy %q, separator %q, shares %v; want stfq, /, acme/a and acme/b 0.25, solo 0.5", qs.Policy, qs.TenantSeparator, shares)
			}
			st.want("delete", a.DeleteQueue(ctx, q), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/explain",
		Doc: `Explain says why a message waits: the first of a key with no
subscription (no-credit), the second behind it (behind-key, 1 ahead); a
message that is not there (MESSAGE_NOT_FOUND) and a queue that is not
(QUEUE_NOT_FOUND).`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a, q := c.Admin(), "adm.explain"
			var st steps
			st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			id1, err := c.Producer().Send(ctx, fila.NewMessage(q, []byte("a")).FairnessKey("acme"))
			st.want("send first", err, nil)
			id2, err := c.Producer().Send(ctx, fila.NewMessage(q, []byte("b")).FairnessKey("acme"))
			st.want("send second", err, nil)
			e, err := a.Explain(ctx, q, id1)
			st.want("explain first", err, nil)
			st.check("explain first", e != nil && e.Reason == fila.WhyNoCredit, "got %+v; want no-credit", e)
			e, err = a.Explain(ctx, q, id2)
			st.want("explain second", err, nil)
			st.check("explain second", e != nil && e.Reason == fila.WhyBehindKey && e.Ahead == 1, "got %+v; want behind-key, 1 ahead", e)
			st.want("explain unknown", second(a.Explain(ctx, q, fila.ID{1})), fila.ErrMessageNotFound)
			st.want("explain no queue", second(a.Explain(ctx, "adm.explain.none", id1)), fila.ErrQueueNotFound)
			st.want("delete", a.DeleteQueue(ctx, q), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/create_queue_errors",
		Doc: `CreateQueue refuses a name with a space and a name ending in .dlq
(INVALID_ARGUMENT), a hook that does not compile (SCRIPT_ERROR, with
the line number), and a tenant separator on a drr queue
(INVALID_ARGUMENT).`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a := c.Admin()
			var st steps
			st.want("bad name", a.CreateQueue(ctx, fila.NewQueueSpec("adm bad name")), fila.ErrInvalidArgument)
			st.want("dlq name", a.CreateQueue(ctx, fila.NewQueueSpec("adm.errors.dlq")), fila.ErrInvalidArgument)
			st.want("bad script", a.CreateQueue(ctx, fila.NewQueueSpec("adm.errors").OnEnqueue("function on_enqueue(msg)\n  return {\nend")), fila.ErrScriptError)
			st.want("separator on drr", a.CreateQueue(ctx, fila.NewQueueSpec("adm.errors").Policy(fila.PolicyDRR).TenantSeparator("/")), fila.ErrInvalidArgument)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/runtime_config",
		Doc: `The runtime config store: set, get, list by prefix, a throttle value of
the wrong form (INVALID_CONFIG_VALUE), delete twice (existed, then not),
and get of a missing key (not found).`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a := c.Admin()
			var st steps
			st.want("set", a.SetConfig(ctx, "throttle.adm.cfg.stripe", "10,20"), nil)
			st.want("set other", a.SetConfig(ctx, "adm.cfg.region", "eu"), nil)
			v, found, err := a.GetConfig(ctx, "throttle.adm.cfg.stripe")
			st.want("get", err, nil)
			st.check("get", found && v == "10,20", "got %q %v", v, found)
			es, err := a.ListConfig(ctx, "throttle.adm.cfg.")
			st.want("list", err, nil)
			st.check("list", len(es) == 1, "got %d entries", len(es))
			st.want("set bad throttle", a.SetConfig(ctx, "throttle.adm.cfg.stripe", "fast"), fila.ErrInvalidConfigValue)
			existed, err := a.DeleteConfig(ctx, "throttle.adm.cfg.stripe")
			st.want("delete", err, nil)
			st.check("delete", existed, "existed = false")
			existed, err = a.DeleteConfig(ctx, "throttle.adm.cfg.stripe")
			st.want("delete again", err, nil)
			st.check("delete again", !existed, "existed = true")
			_, found, err = a.GetConfig(ctx, "throttle.adm.cfg.stripe")
			st.want("get deleted", err, nil)
			st.check("get deleted", !found, "found")
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/api_keys",
		Doc: `API keys and ACLs: a key is minted (its secret shown once), listed
(never with its secret), its ACL replaced and read, then revoked; revoking
it again and reading its ACL get API_KEY_NOT_FOUND. ListApiKeys sees every
key, so the broker must be fresh.`,
		Fresh: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a := c.Admin()
			var st steps
			key, err := a.CreateAPIKey(ctx, fila.NewAPIKeySpec("ci").Permissions(fila.Produce("orders.*")))
			st.want("create key", err, nil)
			ks, err := a.ListAPIKeys(ctx)
			st.want("list keys", err, nil)
			st.check("list keys", len(ks) == 1, "got %d keys", len(ks))
			st.want("set acl", a.SetACL(ctx, key.ID, fila.Consume("orders.eu"), fila.Admin("orders.eu")), nil)
			st.want("get acl", second(a.GetACL(ctx, key.ID)), nil)
			st.want("revoke", a.RevokeAPIKey(ctx, key.ID), nil)
			st.want("revoke again", a.RevokeAPIKey(ctx, key.ID), fila.ErrAPIKeyNotFound)
			st.want("get acl of a revoked key", second(a.GetACL(ctx, key.ID)), fila.ErrAPIKeyNotFound)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "auth/unauthorized",
		Doc: `With auth on, a Handshake carrying an unknown API key gets UNAUTHORIZED
and the broker closes the connection.`,
		BrokerEnv: authOn,
		Run: func(ctx context.Context, s *conformance.Session) error {
			_, err := connect(ctx, s, fila.WithAPIKey("not-a-key"))
			return want("connect", err, fila.ErrUnauthorized)
		},
	},
	{
		Name: "auth/bootstrap_key",
		Doc: `With auth on, the bootstrap key from the configuration authenticates with
every permission: it creates a queue and lists the API keys (there are
none; the bootstrap key is not one).`,
		BrokerEnv: authOn,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s, fila.WithAPIKey(bootstrapKey))
			if err != nil {
				return err
			}
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec("au.bootstrap")), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, "au.bootstrap", []byte("signed"))), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/topology",
		Doc: `Topology names the node that leads a queue's one shard (its address
differs from run to run); a missing queue gets QUEUE_NOT_FOUND.`,
		Targets: coreBroker,
		Run: func(ctx context.Context, s *conformance.Session) error {
			r, err := dialRaw(ctx, s)
			if err != nil {
				return err
			}
			if err := r.handshake(); err != nil {
				return err
			}
			if _, f, err := r.request(&wire.CreateQueue{Name: "adm.topology"}); err != nil || f.Opcode() != wire.OpCreateQueueOk {
				return fmt.Errorf("create queue: %v %v", f, err)
			}
			if _, f, err := r.request(&wire.Topology{Queue: "adm.topology"}); err != nil || f.Opcode() != wire.OpTopologyResult {
				return fmt.Errorf("topology: %v %v", f, err)
			}
			if _, f, err := r.request(&wire.Topology{Queue: "adm.no-such-queue"}); err != nil || f.Opcode() != wire.OpError {
				return fmt.Errorf("topology of a missing queue: %v %v", f, err)
			}
			return firstErr(s.CloseWrite(r.c), r.expectClose())
		},
	},
	{
		Name: "admin/cluster_status",
		Doc: `ClusterStatus asks the node for its view of the cluster: a broker that
runs as a single node answers node_id 0, with no nodes and no groups.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			cs, err := c.Admin().ClusterStatus(ctx)
			st.want("cluster status", err, nil)
			st.check("cluster status", err != nil || (cs.NodeID == 0 && len(cs.Nodes) == 0 && len(cs.Groups) == 0), "got %+v", cs)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/move_queue",
		Doc: `MoveQueue asks to move a queue's replicas to other nodes: a broker that
runs as a single node has none to move, and answers NOT_SUPPORTED.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			st.want("move queue", c.Admin().MoveQueue(ctx, "adm.move", 2, 3, 4), fila.ErrNotSupported)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/drain_node",
		Doc: `DrainNode asks to move every queue off a node, and its undo to take the
node back into service: a broker that runs as a single node has no other
node to move its queues to, and answers both NOT_SUPPORTED.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			_, err = c.Admin().DrainNode(ctx, 2)
			st.want("drain node", err, fila.ErrNotSupported)
			st.want("undrain node", c.Admin().UndrainNode(ctx, 2), fila.ErrNotSupported)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/membership",
		Doc: `Rebalance (a dry run and a plan), AddNode and RemoveNode change or
even out a cluster's members: a broker that runs as a single node has
none to change, and answers each NOT_SUPPORTED.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			_, err = c.Admin().Rebalance(ctx, true)
			st.want("rebalance dry run", err, fila.ErrNotSupported)
			_, err = c.Admin().Rebalance(ctx, false)
			st.want("rebalance", err, fila.ErrNotSupported)
			st.want("add node", c.Admin().AddNode(ctx, 4, "10.0.0.4:5556"), fila.ErrNotSupported)
			st.want("remove node", c.Admin().RemoveNode(ctx, 3), fila.ErrNotSupported)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/redrive",
		Doc: `A message nacked on its last attempt is dead-lettered; Redrive of the
DLQ moves it back (attempts reset) and it is delivered again. Redrive of a
queue that is not a DLQ gets NOT_A_DLQ, of a missing DLQ QUEUE_NOT_FOUND.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a, q := c.Admin(), "adm.redrive"
			var st steps
			st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q).MaxAttempts(1)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("job"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("nack", d.Nack(ctx, "boom"), nil)
			n, err := a.Redrive(ctx, q+".dlq", 0)
			st.want("redrive", err, nil)
			st.check("redrive", n == 1, "moved %d", n)
			d, err = next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("redelivery", d.Attempt() == 1, "attempt %d", d.Attempt())
			st.want("ack", d.Ack(ctx), nil)
			st.want("redrive a queue", second(a.Redrive(ctx, q, 0)), fila.ErrNotADLQ)
			st.want("redrive a missing dlq", second(a.Redrive(ctx, "adm.no-such-queue.dlq", 0)), fila.ErrQueueNotFound)
			st.want("unsubscribe", sub.Close(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "admin/delete_queue_ends_subscription",
		Doc: `Deleting a queue ends its subscriptions: after DeleteQueueOk the
subscriber gets an Error QUEUE_NOT_FOUND on the subscription's ID.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			a, q := c.Admin(), "adm.delete-sub"
			var st steps
			st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(4))
			if err != nil {
				return err
			}
			st.want("delete", a.DeleteQueue(ctx, q), nil)
			st.want("subscription end", ended(ctx, sub), fila.ErrQueueNotFound)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},

	// ---- hot path ----
	{
		Name: "hotpath/enqueue_consume",
		Doc: `One message with a header, a fairness key and a weight is enqueued,
delivered to a subscription with prefetch 1, acked (the credit goes back
first), and the subscription is closed.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.enqueue-consume"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			id, err := c.Producer().Send(ctx, fila.NewMessage(q, []byte("hello")).Header("tenant", "acme").FairnessKey("acme").Weight(3))
			st.want("send", err, nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("delivery", d.ID() == id && string(d.Payload()) == "hello" && d.Header("tenant") == "acme" && d.Attempt() == 1,
				"got %v %q attempt %d", d.ID(), d.Payload(), d.Attempt())
			st.want("ack", d.Ack(ctx), nil)
			st.want("unsubscribe", sub.Close(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/enqueue_batch_partial",
		Doc: `One Enqueue of four messages: two stored, one to a missing queue
(QUEUE_NOT_FOUND) and one with a reserved fila- header (INVALID_ARGUMENT).
Each message gets its own result; the batch as a whole succeeds.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.batch-partial"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			rs, err := c.Producer().SendBatch(ctx, []*fila.Message{
				fila.NewMessage(q, []byte("one")),
				fila.NewMessage("hp.no-such-queue", []byte("two")),
				fila.NewMessage(q, []byte("three")).Header("fila-attempts", "9"),
				fila.NewMessage(q, []byte("four")),
			})
			st.want("send batch", err, nil)
			if err == nil {
				st.want("result 0", rs[0].Err, nil)
				st.want("result 1", rs[1].Err, fila.ErrQueueNotFound)
				st.want("result 2", rs[2].Err, fila.ErrInvalidArgument)
				st.want("result 3", rs[3].Err, nil)
			}
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/message_too_large",
		Doc: `With max_frame_size 4KB the client splits a 9,000-byte message across
continuation frames; with max_message_size 8KB the broker refuses it with
MESSAGE_TOO_LARGE.`,
		BrokerEnv: smallFrame,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.too-large"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, bytes.Repeat([]byte("x"), 9000))), fila.ErrMessageTooLarge)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/continuation",
		Doc: `With max_frame_size 4KB a 6,000-byte message travels to the broker in two
continuation frames, and back in one Delivery (the client accepts 16 MiB).`,
		BrokerEnv: smallFrame,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.continuation"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			payload := bytes.Repeat([]byte("0123456789"), 600)
			st.want("send", second(c.Producer().Enqueue(ctx, q, payload)), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("delivery", bytes.Equal(d.Payload(), payload), "payload of %d bytes", len(d.Payload()))
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/ack_twice",
		Doc: `A delivery acked twice: the first Ack deletes the message, the second
gets MESSAGE_NOT_FOUND (the ID is no longer known). Credit returns once.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.ack-twice"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("once"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(2))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("ack", d.Ack(ctx), nil)
			st.want("ack again", d.Ack(ctx), fila.ErrMessageNotFound)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/ack_batch_partial",
		Doc: `One Ack of two deliveries, the first already acked: MESSAGE_NOT_FOUND
for it, OK for the second.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.ack-batch"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{fila.NewMessage(q, []byte("a")), fila.NewMessage(q, []byte("b"))})), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(2))
			if err != nil {
				return err
			}
			d1, err := next(ctx, sub)
			if err != nil {
				return err
			}
			d2, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("ack first", d1.Ack(ctx), nil)
			st.want("ack both", c.Consumer().AckAll(ctx, []*fila.Delivery{d1, d2}), fila.ErrMessageNotFound)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/nack_retry",
		Doc: `A nacked message is retried under the default policy after the queue's
backoff (10ms here) and delivered again with attempt 2, then acked.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.nack-retry"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).Backoff(10*time.Millisecond, 10*time.Millisecond)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("flaky"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("nack", d.Nack(ctx, "downstream timeout"), nil)
			d, err = next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("redelivery", d.Attempt() == 2, "attempt %d", d.Attempt())
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/retry_after",
		Doc: `RetryAfter fails a delivery with an explicit backoff (50ms): it is
delivered again with attempt 2, then acked.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.retry-after"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("rate limited"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("retry after", d.RetryAfter(ctx, 50*time.Millisecond), nil)
			d, err = next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("redelivery", d.Attempt() == 2, "attempt %d", d.Attempt())
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/release",
		Doc: `Release gives a delivery back without counting an attempt: it is
delivered again at once with the same attempt number, then acked.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.release"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("not now"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("release", d.Release(ctx), nil)
			d, err = next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("redelivery", d.Attempt() == 1, "attempt %d", d.Attempt())
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/extend_lease",
		Doc: `ExtendLease moves a lease's deadline (the result carries the new one);
the delivery is then acked under the same lease.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.extend"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("long job"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("extend", second(d.ExtendLease(ctx, 2*time.Minute)), nil)
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/idempotency",
		Doc: `Two messages with the same idempotency key in one batch and a third in a
later one: the first is stored, the others are duplicates carrying its ID.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.idempotency"
			p := c.Producer()
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			rs, err := p.SendBatch(ctx, []*fila.Message{
				fila.NewMessage(q, []byte("charge")).IdempotencyKey("order-17"),
				fila.NewMessage(q, []byte("charge again")).IdempotencyKey("order-17"),
			})
			st.want("send", err, nil)
			rs2, err := p.SendBatch(ctx, []*fila.Message{fila.NewMessage(q, []byte("charge later")).IdempotencyKey("order-17")})
			st.want("send later", err, nil)
			if len(rs) == 2 && len(rs2) == 1 {
				st.check("duplicates", !rs[0].Duplicate && rs[1].Duplicate && rs2[0].Duplicate && rs[1].ID == rs[0].ID && rs2[0].ID == rs[0].ID,
					"got %+v %+v", rs, rs2)
			}
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "hotpath/delay",
		Doc: `A message enqueued with a 200ms delay is delivered only after it, to a
subscription opened before.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "hp.delay"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			st.want("send", second(c.Producer().Send(ctx, fila.NewMessage(q, []byte("later")).Delay(200*time.Millisecond))), nil)
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},

	// ---- delivery credit ----
	{
		Name: "credit/exhaustion_replenish",
		Doc: `Prefetch 2 and three messages: the broker delivers two and stops at zero
credit. Acking one returns a credit (Credit 1, sent before the Ack), and
only then is the third delivered.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "cr.exhaustion"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{
				fila.NewMessage(q, []byte("m1")), fila.NewMessage(q, []byte("m2")), fila.NewMessage(q, []byte("m3")),
			})), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(2))
			if err != nil {
				return err
			}
			var ds []*fila.Delivery
			for range 2 {
				d, err := next(ctx, sub)
				if err != nil {
					return err
				}
				ds = append(ds, d)
			}
			st.want("ack m1", ds[0].Ack(ctx), nil)
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("third", string(d.Payload()) == "m3", "got %q", d.Payload())
			st.want("ack m2", ds[1].Ack(ctx), nil)
			st.want("ack m3", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "credit/two_subscriptions",
		Doc: `Two subscriptions on one connection, to two queues, each with prefetch
1: one Enqueue feeds both, deliveries arrive on each subscription's
request ID, acks and credits interleave, and both are closed.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			qa, qb := "cr.two.orders", "cr.two.billing"
			var st steps
			st.want("create a", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(qa)), nil)
			st.want("create b", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(qb)), nil)
			sa, err := c.Consumer().Subscribe(ctx, qa, fila.Prefetch(1))
			if err != nil {
				return err
			}
			sb, err := c.Consumer().Subscribe(ctx, qb, fila.Prefetch(1))
			if err != nil {
				return err
			}
			for round := range 2 {
				st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{
					fila.NewMessage(qa, fmt.Appendf(nil, "order %d", round)),
					fila.NewMessage(qb, fmt.Appendf(nil, "invoice %d", round)),
				})), nil)
				da, err := next(ctx, sa)
				if err != nil {
					return err
				}
				db, err := next(ctx, sb)
				if err != nil {
					return err
				}
				st.want("ack b", db.Ack(ctx), nil)
				st.want("ack a", da.Ack(ctx), nil)
			}
			st.want("unsubscribe a", sa.Close(ctx), nil)
			st.want("unsubscribe b", sb.Close(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "credit/unlimited",
		Doc: `Prefetch 0 asks for as much as the broker allows, not for everything:
SubscribeOk grants the broker's cap on unsettled deliveries (max_unsettled,
2 on this broker), two of the three messages are delivered, and the third
follows once an ack returns a credit (Credit 1, sent before the Ack).`,
		BrokerEnv: smallCap,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "cr.unlimited"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{
				fila.NewMessage(q, []byte("u1")), fila.NewMessage(q, []byte("u2")), fila.NewMessage(q, []byte("u3")),
			})), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(0))
			if err != nil {
				return err
			}
			st.check("granted", sub.Prefetch() == 2, "granted %d; want the cap, 2", sub.Prefetch())
			var ds []*fila.Delivery
			for range 2 {
				d, err := next(ctx, sub)
				if err != nil {
					return err
				}
				ds = append(ds, d)
			}
			st.want("ack u1", ds[0].Ack(ctx), nil)
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("third", string(d.Payload()) == "u3", "got %q", d.Payload())
			st.want("ack u2 and u3", c.Consumer().AckAll(ctx, []*fila.Delivery{ds[1], d}), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "credit/lease_expiry_returns_credit",
		Doc: `Credit comes back when a lease ends without a settle. With prefetch 2
and a 1s visibility timeout, two deliveries are held unsettled until
their leases expire (a 1-minute backoff keeps them from coming back).
The broker gives their credit back and says so with LeaseExpired before
it delivers the next two messages with that credit. An Ack of an expired
delivery gets LEASE_EXPIRED and returns no credit (no Credit frame
before it); acks of the new deliveries return theirs.`,
		BrokerEnv: shortLease,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "cr.lease-expiry"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).Backoff(time.Minute, time.Minute)), nil)
			st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{
				fila.NewMessage(q, []byte("e1")), fila.NewMessage(q, []byte("e2")),
				fila.NewMessage(q, []byte("e3")), fila.NewMessage(q, []byte("e4")),
			})), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(2))
			if err != nil {
				return err
			}
			var ds []*fila.Delivery
			for range 4 {
				d, err := next(ctx, sub)
				if err != nil {
					return err
				}
				ds = append(ds, d)
			}
			st.check("after the expiry", string(ds[2].Payload()) == "e3" && string(ds[3].Payload()) == "e4",
				"got %q and %q", ds[2].Payload(), ds[3].Payload())
			st.want("ack expired e1", ds[0].Ack(ctx), fila.ErrLeaseExpired)
			st.want("ack e3", ds[2].Ack(ctx), nil)
			st.want("ack e4", ds[3].Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "credit/unsubscribe_then_ack",
		Doc: `Closing a subscription keeps the leases of what it delivered: a delivery
received before Unsubscribe is acked after UnsubscribeOk.`,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "cr.unsub-ack"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("keep"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.want("unsubscribe", sub.Close(ctx), nil)
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},

	// ---- leases ----
	{
		Name: "lease/expiry_redelivery",
		Doc: `With a 1s visibility timeout an unacked delivery's lease expires and the
message is delivered again (attempt 2, a new lease). An Ack under the old
lease gets LEASE_EXPIRED; under the new one it succeeds.`,
		BrokerEnv: shortLease,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "ls.expiry"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("slow"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(2))
			if err != nil {
				return err
			}
			d1, err := next(ctx, sub)
			if err != nil {
				return err
			}
			d2, err := next(ctx, sub)
			if err != nil {
				return err
			}
			st.check("redelivery", d2.ID() == d1.ID() && d2.Attempt() == 2, "got %v attempt %d", d2.ID(), d2.Attempt())
			st.want("ack old lease", d1.Ack(ctx), fila.ErrLeaseExpired)
			st.want("ack new lease", d2.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "lease/expiry_dead_letter",
		Doc: `On a queue with max_attempts 1 an expired lease is the last attempt: the
message moves to the DLQ, whose subscriber receives it with the
fila-attempts and fila-error headers.`,
		BrokerEnv: shortLease,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			q := "ls.dead-letter"
			var st steps
			st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).MaxAttempts(1)), nil)
			st.want("send", second(c.Producer().Enqueue(ctx, q, []byte("doomed"))), nil)
			sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
			if err != nil {
				return err
			}
			if _, err := next(ctx, sub); err != nil {
				return err
			}
			dlq, err := c.Consumer().Subscribe(ctx, q+".dlq", fila.Prefetch(1))
			if err != nil {
				return err
			}
			d, err := next(ctx, dlq)
			if err != nil {
				return err
			}
			st.check("dead letter", d.Header("fila-attempts") == "1", "headers %v", d.Headers())
			st.want("ack", d.Ack(ctx), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
}

func init() { recorded = append(recorded, lifecycleScenarios()...) }

// lifecycleScenarios are the scenarios of purge, peek, the throttled and
// keyed redrive and the per-subscription lease timeout.
func lifecycleScenarios() []conformance.Scenario {
	return []conformance.Scenario{
		{
			Name: "admin/purge_peek",
			Doc: `A subscription with its own lease timeout (lease_timeout_ms) leases
one of three messages; Peek lists them by ID two at a time (the second
page after the first's next_after), with state, headers and payload
preview, leasing none; PurgeQueue removes the two ready ones and keeps
the leased one, which Peek then lists alone. Both get QUEUE_NOT_FOUND for
a missing queue.`,
			Run: func(ctx context.Context, s *conformance.Session) error {
				c, err := connect(ctx, s)
				if err != nil {
					return err
				}
				a, q := c.Admin(), "adm.purge"
				var st steps
				st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q)), nil)
				for _, p := range []string{"one", "two", "three"} {
					st.want("send", second(c.Producer().Enqueue(ctx, q, []byte(p))), nil)
				}
				sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1), fila.LeaseTimeout(time.Hour))
				if err != nil {
					return err
				}
				d, err := next(ctx, sub)
				if err != nil {
					return err
				}
				page, err := a.Peek(ctx, q, fila.PeekCount(2))
				st.want("peek", err, nil)
				if err == nil {
					st.check("peek", len(page.Messages) == 2 && page.Next == page.Messages[1].ID && page.Messages[0].State == "leased" && string(page.Messages[1].Preview) == "two", "page %+v", page)
					page, err = a.Peek(ctx, q, fila.PeekCount(2), fila.PeekAfter(page.Next))
					st.want("peek after", err, nil)
					st.check("peek after", err == nil && len(page.Messages) == 1 && page.Next == fila.ID{}, "page %+v", page)
				}
				n, err := a.PurgeQueue(ctx, q)
				st.want("purge", err, nil)
				st.check("purge", n == 2, "purged %d", n)
				page, err = a.Peek(ctx, q)
				st.want("peek purged", err, nil)
				st.check("peek purged", err == nil && len(page.Messages) == 1 && page.Messages[0].ID == d.ID(), "page %+v", page)
				st.want("ack", d.Ack(ctx), nil)
				st.want("purge a missing queue", second(a.PurgeQueue(ctx, "adm.no-such-queue")), fila.ErrQueueNotFound)
				st.want("peek a missing queue", second(a.Peek(ctx, "adm.no-such-queue")), fila.ErrQueueNotFound)
				st.want("unsubscribe", sub.Close(ctx), nil)
				st.want("close", c.Close(), nil)
				return st.err
			},
		},
		{
			Name: "admin/redrive_throttled",
			Doc: `Redrive with a rate and a fairness key starts a throttled redrive of that
key's dead letters: the first moves at once, the rest are pending. Redrive
with cancel stops it and reports what it moved and left.`,
			Run: func(ctx context.Context, s *conformance.Session) error {
				c, err := connect(ctx, s)
				if err != nil {
					return err
				}
				a, q := c.Admin(), "adm.redrive-rate"
				var st steps
				st.want("create", a.CreateQueue(ctx, fila.NewQueueSpec(q).MaxAttempts(1)), nil)
				for _, k := range []string{"a", "b", "a"} {
					st.want("send", second(c.Producer().Send(ctx, fila.NewMessage(q, []byte(k)).FairnessKey(k))), nil)
				}
				sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(3))
				if err != nil {
					return err
				}
				for range 3 {
					d, err := next(ctx, sub)
					if err != nil {
						return err
					}
					st.want("nack", d.Nack(ctx, "boom"), nil)
				}
				r, err := a.RedriveWith(ctx, q+".dlq", fila.RedriveRate(1), fila.RedriveKey("a"))
				st.want("redrive", err, nil)
				st.check("redrive", err == nil && r.Moved == 1 && r.Pending == 1, "status %+v", r)
				r, err = a.CancelRedrive(ctx, q+".dlq")
				st.want("cancel", err, nil)
				st.check("cancel", err == nil && r.Moved+r.Pending == 2, "status %+v", r)
				st.want("unsubscribe", sub.Close(ctx), nil)
				st.want("close", c.Close(), nil)
				return st.err
			},
		},
	}
}
