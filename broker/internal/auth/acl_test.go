package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
	"pgregory.net/rapid"
)

func TestValidatePattern(t *testing.T) {
	valid := []string{"*", "orders", "orders.", "orders.*", "orders.eu.*", "orders.dlq", "a", "a.*", "a..*",
		"Tenant_1-x:y", strings.Repeat("q", MaxPatternLen), strings.Repeat("q", MaxPatternLen-2) + ".*"}
	for _, p := range valid {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v; want nil", p, err)
		}
	}
	invalid := []string{"", ".*", "**", "*.*", "orders*", "orders.*.*", "*orders", "or*ders", "orders.*x",
		"orders .*", "orders/eu", "orders\x00", "é", strings.Repeat("q", MaxPatternLen+1)}
	for _, p := range invalid {
		if err := ValidatePattern(p); !errors.Is(err, fault.ErrInvalidArgument) {
			t.Errorf("ValidatePattern(%q) = %v; want an error wrapping fault.ErrInvalidArgument", p, err)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, queue string
		want           bool
	}{
		{"*", "orders", true},
		{"*", "orders.dlq", true},
		{"*", "*", true},
		{"orders", "orders", true},
		{"orders", "orders.dlq", false},
		{"orders", "orders.eu", false},
		{"orders", "order", false},
		{"orders", "ordersx", false},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.eu.west", true},
		{"orders.*", "orders.dlq", true},
		{"orders.*", "orders.eu.dlq", true},
		{"orders.*", "orders", false},
		{"orders.*", "ordersx", false},
		{"orders.*", "orders.", false},
		{"orders.*", "xorders.eu", false},
		{"orders.*", "*", false},
		{"orders.eu.*", "orders.eu", false},
		{"orders.eu.*", "orders.us.x", false},
		{"orders.dlq", "orders.dlq", true},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.queue); got != tt.want {
			t.Errorf("Match(%q, %q) = %v; want %v", tt.pattern, tt.queue, got, tt.want)
		}
	}
}

// oracle is the documented meaning of a valid pattern, as a regular
// expression built independently of Match.
func oracle(pattern string) *regexp.Regexp {
	switch {
	case pattern == "*":
		return regexp.MustCompile(`^(?s:.*)$`)
	case strings.HasSuffix(pattern, ".*"):
		return regexp.MustCompile(`^` + regexp.QuoteMeta(strings.TrimSuffix(pattern, "*")) + `(?s:.+)$`)
	default:
		return regexp.MustCompile(`^` + regexp.QuoteMeta(pattern) + `$`)
	}
}

// Small alphabets make prefixes, dots and stars collide often.
var (
	patternGen = rapid.OneOf(
		rapid.Just("*"),
		rapid.StringMatching(`[ab.]{1,4}`),
		rapid.Map(rapid.StringMatching(`[ab.]{1,3}`), func(s string) string { return s + ".*" }),
		rapid.StringMatching(`[ab.*]{0,5}`), // mostly invalid
	)
	queueGen = rapid.StringMatching(`[ab.*x]{0,6}`)
)

// TestMatchProperty: for every valid pattern, Match grants exactly the
// queues of the pattern's documented meaning, and nothing else.
func TestMatchProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := patternGen.Draw(t, "pattern")
		q := queueGen.Draw(t, "queue")
		if ValidatePattern(p) != nil {
			return
		}
		if got, want := Match(p, q), oracle(p).MatchString(q); got != want {
			t.Fatalf("Match(%q, %q) = %v; want %v", p, q, got, want)
		}
	})
}

// TestAllowedProperty: a key's ACL grants a kind on a queue exactly when one
// of its permissions has that kind and a pattern whose documented meaning
// covers the queue. No pattern leaks to another kind or another queue.
func TestAllowedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := mustOpen(t, newMemKV(), "")
		var perms []Permission
		for _, p := range rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Permission {
			return Permission{
				Kind:    Kind(rapid.IntRange(1, 3).Draw(t, "kind")),
				Pattern: patternGen.Draw(t, "pattern"),
			}
		}), 0, 4).Draw(t, "perms") {
			if ValidatePattern(p.Pattern) == nil {
				perms = append(perms, p)
			}
		}
		id, secret, err := s.Create("prop", perms)
		if err != nil {
			t.Fatalf("Create(%v) = %v", perms, err)
		}
		pr, err := s.Authenticate(secret)
		if err != nil || pr.KeyID() != id {
			t.Fatalf("Authenticate = %v, %v", pr.KeyID(), err)
		}
		for i := 0; i < 8; i++ {
			kind := Kind(rapid.IntRange(0, 3).Draw(t, "check kind"))
			q := queueGen.Draw(t, "queue")
			want := false
			for _, p := range perms {
				if (kind == AnyKind || p.Kind == kind) && oracle(p.Pattern).MatchString(q) {
					want = true
				}
			}
			if got := pr.Allowed(kind, q); got != want {
				t.Fatalf("Allowed(%v, %q) with ACL %v = %v; want %v", kind, q, perms, got, want)
			}
		}
	})
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"*", "orders"}, {"orders.*", "orders"}, {"orders.*", "ordersx"}, {"orders.*", "orders.eu"},
		{"orders", "orders.dlq"}, {"a.*", "a."}, {".*", ".x"}, {"orders.*", "*"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, queue string) {
		got := Match(pattern, queue)
		if ValidatePattern(pattern) != nil {
			return
		}
		if want := oracle(pattern).MatchString(queue); got != want {
			t.Fatalf("Match(%q, %q) = %v; want %v", pattern, queue, got, want)
		}
	})
}

func TestRequired(t *testing.T) {
	tests := []struct {
		op    Op
		queue string
		want  []Need
	}{
		{OpPing, "", nil},
		{OpCredit, "orders", []Need{{Consume, "orders"}}},
		{OpUnsubscribe, "orders", nil},
		{OpListQueues, "", nil},
		{OpEnqueue, "orders", []Need{{Produce, "orders"}}},
		{OpSubscribe, "orders", []Need{{Consume, "orders"}}},
		{OpSubscribe, "orders.dlq", []Need{{Consume, "orders.dlq"}}},
		{OpAck, "orders", []Need{{Consume, "orders"}}},
		{OpNack, "orders", []Need{{Consume, "orders"}}},
		{OpRetryAfter, "orders", []Need{{Consume, "orders"}}},
		{OpExtendLease, "orders", []Need{{Consume, "orders"}}},
		{OpCreateQueue, "orders", []Need{{Admin, "orders"}}},
		{OpDeleteQueue, "orders", []Need{{Admin, "orders"}}},
		{OpQueueStats, "orders", []Need{{Admin, "orders"}}},
		{OpRedrive, "orders.dlq", []Need{{Admin, "orders.dlq"}, {Admin, "orders"}}},
		{OpRedrive, "orders", []Need{{Admin, "orders"}}},
		{OpRedrive, ".dlq", []Need{{Admin, ".dlq"}}},
		{OpTopology, "orders", []Need{{AnyKind, "orders"}}},
		{OpSetConfig, "", []Need{{Admin, "*"}}},
		{OpGetConfig, "", []Need{{Admin, "*"}}},
		{OpListConfig, "", []Need{{Admin, "*"}}},
		{OpDeleteConfig, "", []Need{{Admin, "*"}}},
		{OpCreateAPIKey, "", []Need{{Admin, "*"}}},
		{OpRevokeAPIKey, "", []Need{{Admin, "*"}}},
		{OpListAPIKeys, "", []Need{{Admin, "*"}}},
		{OpSetACL, "", []Need{{Admin, "*"}}},
		{OpGetACL, "", []Need{{Admin, "*"}}},
		{OpClusterStatus, "", []Need{{Admin, "*"}}},
		{OpMoveQueue, "", []Need{{Admin, "*"}}},
		{OpMoveQueue, "orders", []Need{{Admin, "*"}}},
		{OpDrainNode, "", []Need{{Admin, "*"}}},
		{OpRebalance, "", []Need{{Admin, "*"}}},
		{OpAddNode, "", []Need{{Admin, "*"}}},
		{OpRemoveNode, "", []Need{{Admin, "*"}}},
		{Op(0), "orders", []Need{{Admin, "*"}}},
		{Op(200), "orders", []Need{{Admin, "*"}}},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			needs, n := Required(tt.op, tt.queue)
			got := needs[:n]
			if len(got) != len(tt.want) {
				t.Fatalf("Required(%v, %q) = %v; want %v", tt.op, tt.queue, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("Required(%v, %q) = %v; want %v", tt.op, tt.queue, got, tt.want)
				}
			}
		})
	}
	for op := OpPing; op < opEnd; op++ {
		if strings.HasPrefix(op.String(), "op(") {
			t.Errorf("Op %d has no name", op)
		}
	}
}
