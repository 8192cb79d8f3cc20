package auth

import (
	"fmt"
	"strings"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// A Kind is a kind of access to queues; its values are the protocol's
// PermissionKind values.
type Kind uint8

// The kinds of permission. They are independent: Admin does not imply
// Produce or Consume.
const (
	// AnyKind appears only in a Need, meaning any of the three kinds; it is
	// never granted.
	AnyKind Kind = 0
	// Produce allows Enqueue to matching queues.
	Produce Kind = 1
	// Consume allows Subscribe to matching queues, Credit for those
	// subscriptions, and Ack, Nack, RetryAfter, ExtendLease and Release
	// of their deliveries.
	Consume Kind = 2
	// Admin allows the admin operations on matching queues: CreateQueue,
	// DeleteQueue, QueueStats, Redrive. Admin on "*" also allows runtime
	// config and API key operations, and the cluster's status.
	Admin Kind = 3
)

// String returns "produce", "consume", "admin" or "any".
func (k Kind) String() string {
	switch k {
	case AnyKind:
		return "any"
	case Produce:
		return "produce"
	case Consume:
		return "consume"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// A Permission grants one kind of access to the queues its pattern
// matches; see Match.
type Permission struct {
	Kind    Kind
	Pattern string
}

// String returns "kind:pattern", such as "produce:orders.*".
func (p Permission) String() string { return p.Kind.String() + ":" + p.Pattern }

// Limits on ACLs.
const (
	// MaxPatternLen is the longest pattern in bytes: a queue name is at most
	// 200 bytes and its dead-letter queue's name 204.
	MaxPatternLen = 255
	// MaxPermissions is the most permissions one key may hold.
	MaxPermissions = 1000
)

// ValidatePattern checks that p is a queue pattern:
//
//   - "*", which matches every queue;
//   - a prefix wildcard "<prefix>.*", which matches every queue whose name
//     starts with "<prefix>." and goes on for at least one more byte;
//   - an exact queue name, which matches only that queue.
//
// Names and prefixes are letters, digits and "._-:", and the whole pattern
// is at most MaxPatternLen bytes. "*" anywhere else, and an empty prefix
// (".*"), are refused. The error wraps fault.ErrInvalidArgument.
func ValidatePattern(p string) error {
	if p == "*" {
		return nil
	}
	if p == "" || len(p) > MaxPatternLen {
		return fmt.Errorf("pattern %q: %w: want 1 to %d bytes", clip(p), fault.ErrInvalidArgument, MaxPatternLen)
	}
	name := strings.TrimSuffix(p, ".*")
	if name == "" {
		return fmt.Errorf("pattern %q: %w: empty prefix (use \"*\" for every queue)", p, fault.ErrInvalidArgument)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("pattern %q: %w: want \"*\", a queue name, or a name prefix followed by \".*\" (names are letters, digits and \"._-:\")",
				clip(p), fault.ErrInvalidArgument)
		}
	}
	return nil
}

// nameByte reports whether b may appear in a queue name.
func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == '-' || b == ':'
}

// Match reports whether the valid pattern (see ValidatePattern) grants
// access to queue. "*" matches everything; "orders.*" matches "orders.eu",
// "orders.eu.west" and "orders.dlq" but not "orders" or "ordersx"; any other
// pattern matches only the queue of that exact name. A dead-letter queue is
// matched by its name like any other queue: "orders" does not match
// "orders.dlq". Match does not allocate.
func Match(pattern, queue string) bool {
	if pattern == "*" {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok && strings.HasSuffix(prefix, ".") {
		return len(queue) > len(prefix) && strings.HasPrefix(queue, prefix)
	}
	return pattern == queue
}

// validatePermissions checks an ACL for SetACL and Create.
func validatePermissions(perms []Permission) error {
	if len(perms) > MaxPermissions {
		return fmt.Errorf("%w: %d permissions, over the limit of %d", fault.ErrInvalidArgument, len(perms), MaxPermissions)
	}
	for _, p := range perms {
		if p.Kind != Produce && p.Kind != Consume && p.Kind != Admin {
			return fmt.Errorf("permission on %q: %w: kind %d is not produce (1), consume (2) or admin (3)",
				clip(p.Pattern), fault.ErrInvalidArgument, uint8(p.Kind))
		}
		if err := ValidatePattern(p.Pattern); err != nil {
			return err
		}
	}
	return nil
}

// allows reports whether perms grant kind on queue.
func allows(perms []Permission, kind Kind, queue string) bool {
	for _, p := range perms {
		if (kind == AnyKind || p.Kind == kind) && Match(p.Pattern, queue) {
			return true
		}
	}
	return false
}

// An Op is a protocol operation, for Required.
type Op uint8

// The operations. Handshake is not among them: it is where a key is
// authenticated.
const (
	OpPing Op = iota + 1
	OpEnqueue
	OpSubscribe
	OpCredit
	OpUnsubscribe
	OpAck
	OpNack
	OpRetryAfter
	OpExtendLease
	OpCreateQueue
	OpDeleteQueue
	OpListQueues
	OpQueueStats
	OpSetConfig
	OpGetConfig
	OpListConfig
	OpDeleteConfig
	OpRedrive
	OpCreateAPIKey
	OpRevokeAPIKey
	OpListAPIKeys
	OpSetACL
	OpGetACL
	OpTopology
	OpRelease
	OpClusterStatus
	OpMoveQueue
	OpDrainNode
	OpRebalance
	OpAddNode
	OpRemoveNode
	OpPurgeQueue
	OpPeek
	opEnd
)

var opNames = [...]string{
	OpPing: "ping", OpEnqueue: "enqueue", OpSubscribe: "subscribe", OpCredit: "credit",
	OpUnsubscribe: "unsubscribe", OpAck: "ack", OpNack: "nack", OpRetryAfter: "retry after",
	OpExtendLease: "extend lease", OpCreateQueue: "create queue", OpDeleteQueue: "delete queue",
	OpListQueues: "list queues", OpQueueStats: "queue stats", OpSetConfig: "set config",
	OpGetConfig: "get config", OpListConfig: "list config", OpDeleteConfig: "delete config",
	OpRedrive: "redrive", OpCreateAPIKey: "create api key", OpRevokeAPIKey: "revoke api key",
	OpListAPIKeys: "list api keys", OpSetACL: "set acl", OpGetACL: "get acl", OpTopology: "topology",
	OpRelease: "release", OpClusterStatus: "cluster status", OpMoveQueue: "move queue",
	OpDrainNode: "drain node", OpRebalance: "rebalance", OpAddNode: "add node", OpRemoveNode: "remove node",
	OpPurgeQueue: "purge queue", OpPeek: "peek",
}

// String returns the operation's name in lower case, such as "enqueue".
func (op Op) String() string {
	if op < opEnd && opNames[op] != "" {
		return opNames[op]
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// A Need is one condition an operation puts on the caller's key: a
// permission of Kind (any kind for AnyKind) that matches Queue.
type Need struct {
	Kind  Kind
	Queue string
}

// Everything is the queue name that stands for the whole broker in a Need:
// runtime config, API keys, the cluster's status, moving a queue's
// replicas, draining, adding and removing nodes and rebalancing need
// Admin on it, which only the pattern
// "*" grants, since no queue name contains "*".
const Everything = "*"

// DLQSuffix ends the name of every dead-letter queue: the DLQ of "orders"
// is "orders.dlq".
const DLQSuffix = ".dlq"

// Required returns what op on queue needs of the caller's key: needs[:n],
// every one of which must hold. It does not allocate. The table:
//
//	Enqueue                                   produce on the queue
//	Subscribe, Credit, Ack, Nack, RetryAfter,
//	ExtendLease, Release                      consume on the queue
//	CreateQueue, DeleteQueue, QueueStats,
//	PurgeQueue, Peek                          admin on the queue
//	Redrive of <q>.dlq                        admin on <q>.dlq and admin on <q>
//	Topology                                  any permission on the queue
//	SetConfig, GetConfig, ListConfig,
//	DeleteConfig, CreateApiKey, RevokeApiKey,
//	ListApiKeys, SetAcl, GetAcl,
//	ClusterStatus, MoveQueue, DrainNode,
//	Rebalance, AddNode, RemoveNode            admin on "*" (Everything)
//	Ping, Unsubscribe, ListQueues             nothing but a valid key
//
// Credit is checked against the queue of the subscription it names, so a
// subscription whose key lost consume cannot be refilled; Unsubscribe
// needs nothing more, so a client may always stop one. ListQueues returns only the queues the key may see
// (Principal.Visible). A Redrive of a queue not named <q>.dlq needs admin
// on it, and then fails with NOT_A_DLQ. An unknown op needs admin on "*":
// an operation missing from this table fails closed.
func Required(op Op, queue string) (needs [2]Need, n int) {
	switch op {
	case OpPing, OpUnsubscribe, OpListQueues:
		return needs, 0
	case OpEnqueue:
		needs[0] = Need{Produce, queue}
	case OpSubscribe, OpCredit, OpAck, OpNack, OpRetryAfter, OpExtendLease, OpRelease:
		needs[0] = Need{Consume, queue}
	case OpCreateQueue, OpDeleteQueue, OpQueueStats, OpPurgeQueue, OpPeek:
		needs[0] = Need{Admin, queue}
	case OpRedrive:
		needs[0] = Need{Admin, queue}
		if parent, ok := strings.CutSuffix(queue, DLQSuffix); ok && parent != "" {
			needs[1] = Need{Admin, parent}
			return needs, 2
		}
	case OpTopology:
		needs[0] = Need{AnyKind, queue}
	default: // config, API keys, the cluster's status, moves and drains, and any op this table does not know
		needs[0] = Need{Admin, Everything}
	}
	return needs, 1
}

// clip cuts s to a length fit for an error message.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
