package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/cli/internal/cmd"
)

// exitCase is one run of the CLI and what it must end with.
type exitCase struct {
	as    *cli   // the broker and the key it runs with
	stdin string // for enqueue -
	args  []string
	code  int
	// want is in stderr when code is not 0.
	want string
	// jsonCode, if set, is the "code" of the JSON error that the same
	// run with -o json writes.
	jsonCode string
}

// run runs the cases in order (they build on each other: a queue
// created, then deleted), and returns the exit codes each command ended
// with.
func runExitCases(t *testing.T, cases []exitCase) map[string][]int {
	t.Helper()
	seen := map[string][]int{}
	for _, tc := range cases {
		name := strings.Join(tc.args, " ")
		r := tc.as.runIn(tc.stdin, tc.args...)
		switch {
		case r.code != tc.code:
			t.Errorf("fila %s: exit %d; want %d\nstdout: %s\nstderr: %s", name, r.code, tc.code, r.stdout, r.stderr)
		case tc.code == 0 && r.stderr != "":
			t.Errorf("fila %s: exit 0 with stderr %q", name, r.stderr)
		case tc.code != 0 && !strings.Contains(r.stderr, tc.want):
			t.Errorf("fila %s: exit %d, stderr %q; want %q", name, r.code, r.stderr, tc.want)
		case tc.code != 0 && (strings.Count(r.stderr, "fila: fila:") > 0 || !strings.HasPrefix(r.stderr, "fila: ")):
			t.Errorf("fila %s: stderr %q; want lines that start with one \"fila: \"", name, r.stderr)
		}
		if tc.jsonCode != "" {
			r := tc.as.runIn(tc.stdin, append(tc.args, "-o", "json")...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			var e map[string]string
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &e); err != nil || r.code != tc.code || e["code"] != tc.jsonCode || !strings.HasPrefix(e["error"], "fila: ") {
				t.Errorf("fila %s -o json: exit %d, stderr %q; want exit %d and a JSON error with code %s", name, r.code, r.stderr, tc.code, tc.jsonCode)
			}
		}
		command := tc.args[0]
		if len(tc.args) > 1 && (command == "auth" || command == "cluster" || command == "config" || command == "queue") {
			command += " " + tc.args[1]
		}
		if !slices.Contains(seen[command], r.code) {
			seen[command] = append(seen[command], r.code)
		}
	}
	return seen
}

// TestExitCodes runs every command into each exit code it can end with,
// against a real broker: 0 on success, 1 when the broker refused the
// command (or could not be reached), 2 for a usage error, 3 when the
// queue, message, API key or config key does not exist. Each command is
// checked for every one of those codes it can return.
func TestExitCodes(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	const root = "bootstrap-secret-0123456789"
	secured := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+root))
	admin := newCLI(t, secured, "FILA_API_KEY="+root)
	stopped := filatest.Start(t)
	gone := newCLI(t, stopped)
	stopped.Stop(t)

	// The broker's state the cases start from: jobs with a dead letter
	// and a delayed message, a config key; on the secured broker a key
	// that may consume jobs only, and one to revoke.
	c.ok("queue", "create", "jobs", "--max-attempts", "1")
	c.ok("enqueue", "jobs", "poison")
	c.ok("consume", "jobs", "--count", "1", "--nack", "boom")
	delayed := strings.TrimSpace(c.ok("enqueue", "jobs", "later", "--delay", "1h"))
	c.ok("queue", "create", "gone")
	c.ok("config", "set", "routing.region", "eu")
	admin.ok("queue", "create", "jobs")
	var worker, temp struct {
		ID     string `json:"key_id"`
		Secret string `json:"secret"`
	}
	admin.json(&worker, "auth", "create", "--name", "worker", "--perm", "consume:jobs")
	admin.json(&temp, "auth", "create", "--name", "temp")
	w := newCLI(t, secured, "FILA_API_KEY="+worker.Secret)
	const missingKey = "00000000000000ff"
	const missingID = "01933b5e-6f9c-7a4e-9d1f-2b8c4a0e5d71"

	seen := runExitCases(t, []exitCase{
		// queue
		{as: c, args: []string{"queue", "create", "orders"}},
		{as: c, args: []string{"queue", "create", "orders"}, code: 1, want: "fila: queue create orders: queue already exists", jsonCode: "QUEUE_EXISTS"},
		{as: c, args: []string{"queue", "create"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: c, args: []string{"queue", "create", "odd", "--backoff-base", "-1s"}, code: 2, want: "--backoff-base -1s"},
		{as: c, args: []string{"queue", "list"}},
		{as: c, args: []string{"queue", "list", "extra"}, code: 2, want: "accepts 0 arg(s), received 1"},
		{as: gone, args: []string{"queue", "list", "--timeout", "5s"}, code: 1, want: "fila: connect "},
		{as: c, args: []string{"queue", "inspect", "jobs"}},
		{as: c, args: []string{"queue", "inspect", "nope"}, code: 3, want: "fila: queue inspect nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"queue", "inspect", "jobs", "--top", "0"}, code: 2, want: "--top 0: want 1 to"},
		{as: w, args: []string{"queue", "inspect", "jobs"}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"queue", "delete", "gone"}},
		{as: c, args: []string{"queue", "delete", "gone"}, code: 3, want: "fila: queue delete gone: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"queue", "delete", "jobs.dlq"}, code: 1, want: "a dead-letter queue is deleted with jobs", jsonCode: "INVALID_ARGUMENT"},
		{as: c, args: []string{"queue", "delete"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: c, args: []string{"queue", "bogus"}, code: 2, want: `unknown command "bogus" for "fila queue"`},
		{as: c, args: []string{"queue", "purge", "orders"}},
		{as: c, args: []string{"queue", "purge", "nope"}, code: 3, want: "fila: queue purge nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"queue", "purge"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: w, args: []string{"queue", "purge", "jobs"}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"queue", "peek", "jobs"}},
		{as: c, args: []string{"queue", "peek", "nope"}, code: 3, want: "fila: queue peek nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"queue", "peek", "jobs", "--count", "0"}, code: 2, want: "--count 0: want 1 to 1000"},
		{as: w, args: []string{"queue", "peek", "jobs"}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},

		// enqueue, one message and stdin's lines
		{as: c, args: []string{"enqueue", "jobs", "x"}},
		{as: c, args: []string{"enqueue", "nope", "x"}, code: 3, want: "fila: enqueue nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"enqueue", "jobs", "x", "--header", "novalue"}, code: 2, want: `--header "novalue": want key=value`},
		{as: w, args: []string{"enqueue", "jobs", "x"}, code: 1, want: "fila: enqueue jobs: forbidden", jsonCode: "FORBIDDEN"},
		{as: c, stdin: "a\nb\n", args: []string{"enqueue", "jobs", "-"}},
		{as: c, stdin: "a\nb\n", args: []string{"enqueue", "nope", "-"}, code: 3, want: "fila: line 2: enqueue nope: queue not found\nfila: 2 messages were rejected", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, stdin: "a\n", args: []string{"enqueue", "jobs", "-", "--idempotency-key", "k"}, code: 2, want: "--idempotency-key with -"},
		{as: w, stdin: "a\n", args: []string{"enqueue", "jobs", "-"}, code: 1, want: "fila: 1 message was rejected", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"enqueue", "jobs"}, code: 2, want: "accepts 2 arg(s), received 1"},

		// consume
		{as: c, args: []string{"consume", "jobs", "--count", "1"}},
		{as: c, args: []string{"consume", "nope", "--wait", "1s"}, code: 3, want: "fila: consume nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"consume", "jobs", "--no-ack", "--nack", "x"}, code: 2, want: "exclude each other"},
		{as: w, args: []string{"consume", "orders", "--wait", "1s"}, code: 1, want: "fila: consume orders: forbidden", jsonCode: "FORBIDDEN"},

		// config
		{as: c, args: []string{"config", "set", "routing.zone", "a"}},
		{as: c, args: []string{"config", "set", "throttle.x", "fast"}, code: 1, want: "fila: config set throttle.x: throttle value", jsonCode: "INVALID_CONFIG_VALUE"},
		{as: c, args: []string{"config", "set", "routing.zone"}, code: 2, want: "accepts 2 arg(s), received 1"},
		{as: c, args: []string{"config", "get", "routing.region"}},
		{as: c, args: []string{"config", "get", "unset.key"}, code: 3, want: "fila: config get unset.key: not set", jsonCode: "NOT_FOUND"},
		{as: c, args: []string{"config", "get"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: w, args: []string{"config", "get", "routing.region"}, code: 1, want: "fila: config get routing.region: forbidden", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"config", "list"}},
		{as: c, args: []string{"config", "list", "extra"}, code: 2, want: "accepts 0 arg(s), received 1"},
		{as: w, args: []string{"config", "list"}, code: 1, want: "fila: config list: forbidden", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"config", "delete", "routing.zone"}},
		{as: c, args: []string{"config", "delete", "routing.zone"}, code: 3, want: "fila: config delete routing.zone: not set", jsonCode: "NOT_FOUND"},
		{as: c, args: []string{"config", "delete"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: w, args: []string{"config", "delete", "routing.region"}, code: 1, want: "fila: config delete routing.region: forbidden", jsonCode: "FORBIDDEN"},

		// redrive
		{as: c, args: []string{"redrive", "jobs.dlq"}},
		{as: c, args: []string{"redrive", "nope.dlq"}, code: 3, want: "fila: redrive nope.dlq: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"redrive", "jobs"}, code: 1, want: "fila: redrive jobs: not a dead-letter queue", jsonCode: "NOT_A_DLQ"},
		{as: c, args: []string{"redrive"}, code: 2, want: "accepts 1 arg(s), received 0"},

		// explain
		{as: c, args: []string{"explain", "jobs", delayed}},
		{as: c, args: []string{"explain", "jobs", missingID}, code: 3, want: "message not found", jsonCode: "MESSAGE_NOT_FOUND"},
		{as: c, args: []string{"explain", "nope", missingID}, code: 3, want: "fila: explain nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: c, args: []string{"explain", "jobs", "not-an-id"}, code: 2, want: `fila: message ID "not-an-id": invalid UUID length`},
		{as: w, args: []string{"explain", "jobs", missingID}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},

		// auth: keys and their ACLs
		{as: admin, args: []string{"auth", "create", "--name", "ci", "--perm", "produce:jobs"}},
		{as: admin, args: []string{"auth", "create"}, code: 2, want: "--name is required"},
		{as: admin, args: []string{"auth", "create", "--name", "ci", "--perm", "publish:*"}, code: 2, want: "want produce, consume or admin"},
		{as: admin, args: []string{"auth", "create", "--name", "ci", "--perm", "produce:a*"}, code: 1, want: `pattern "a*": invalid argument`, jsonCode: "INVALID_ARGUMENT"},
		{as: w, args: []string{"auth", "create", "--name", "ci"}, code: 1, want: "fila: auth create ci: forbidden", jsonCode: "FORBIDDEN"},
		{as: admin, args: []string{"auth", "list"}},
		{as: admin, args: []string{"auth", "list", "extra"}, code: 2, want: "accepts 0 arg(s), received 1"},
		{as: w, args: []string{"auth", "list"}, code: 1, want: "fila: auth list: forbidden", jsonCode: "FORBIDDEN"},
		{as: admin, args: []string{"auth", "acl", "set", worker.ID, "consume:jobs"}},
		{as: admin, args: []string{"auth", "acl", "set", missingKey, "consume:jobs"}, code: 3, want: `fila: auth acl set "` + missingKey + `": api key not found`, jsonCode: "API_KEY_NOT_FOUND"},
		{as: admin, args: []string{"auth", "acl", "set", worker.ID, "consume"}, code: 2, want: `parse permission "consume"`},
		{as: w, args: []string{"auth", "acl", "set", worker.ID, "admin:*"}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},
		{as: admin, args: []string{"auth", "acl", "get", worker.ID}},
		{as: admin, args: []string{"auth", "acl", "get", missingKey}, code: 3, want: `fila: auth acl get "` + missingKey + `": api key not found`, jsonCode: "API_KEY_NOT_FOUND"},
		{as: admin, args: []string{"auth", "acl", "get"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: admin, args: []string{"auth", "revoke", temp.ID}},
		{as: admin, args: []string{"auth", "revoke", temp.ID}, code: 3, want: `fila: auth revoke "` + temp.ID + `": api key not found`, jsonCode: "API_KEY_NOT_FOUND"},
		{as: admin, args: []string{"auth", "revoke"}, code: 2, want: "accepts 1 arg(s), received 0"},
		{as: w, args: []string{"auth", "revoke", worker.ID}, code: 1, want: "forbidden", jsonCode: "FORBIDDEN"},
		{as: newCLI(t, secured, "FILA_API_KEY=fila_wrong"), args: []string{"auth", "list"}, code: 1, want: "unauthorized: unknown or revoked API key", jsonCode: "UNAUTHORIZED"},

		// cluster, on a single node (see TestClusterExitCodes for a
		// cluster)
		{as: c, args: []string{"cluster", "status"}},
		{as: w, args: []string{"cluster", "status"}, code: 1, want: "fila: cluster status: forbidden", jsonCode: "FORBIDDEN"},
		{as: c, args: []string{"cluster", "move", "jobs", "--to", "1"}, code: 1, want: "fila: cluster move jobs: a single node has no replicas to move: not supported", jsonCode: "NOT_SUPPORTED"},
		{as: c, args: []string{"cluster", "move", "jobs"}, code: 2, want: `required flag(s) "to" not set`},
		{as: c, args: []string{"cluster", "drain", "1"}, code: 1, want: "not supported", jsonCode: "NOT_SUPPORTED"},
		{as: c, args: []string{"cluster", "drain", "x"}, code: 2, want: `"x" is not a node ID`},
		{as: c, args: []string{"cluster", "rebalance"}, code: 1, want: "fila: cluster rebalance: a single node has nothing to even out: not supported", jsonCode: "NOT_SUPPORTED"},
		{as: c, args: []string{"cluster", "rebalance", "extra"}, code: 2, want: `unknown command "extra" for "fila cluster rebalance"`},
		{as: c, args: []string{"cluster", "add-node", "2", "--peer-addr", "127.0.0.1:1"}, code: 1, want: "not supported", jsonCode: "NOT_SUPPORTED"},
		{as: c, args: []string{"cluster", "add-node", "2"}, code: 2, want: `--peer-addr "": want host:port`},
		{as: c, args: []string{"cluster", "remove-node", "2"}, code: 1, want: "not supported", jsonCode: "NOT_SUPPORTED"},
		{as: c, args: []string{"cluster", "remove-node", "x"}, code: 2, want: `"x" is not a node ID`},

		// bench
		{as: c, args: []string{"bench", "produce", "--count", "10"}},
		{as: c, args: []string{"bench", "produce", "--producers", "0", "--count", "1"}, code: 2, want: "--producers 0: want 1 or more"},
		{as: c, args: []string{"bench", "produce", "--size", "20000000", "--count", "1"}, code: 1, want: "fila: bench: produce: enqueue bench-produce-", jsonCode: "MESSAGE_TOO_LARGE"},

		// the rest
		{as: c, args: []string{"ping"}},
		{as: gone, args: []string{"ping", "--timeout", "5s"}, code: 1, want: "fila: connect "},
		{as: c, args: []string{"ping", "extra"}, code: 2, want: "accepts 0 arg(s), received 1"},
		{as: c, args: []string{"version"}},
		{as: c, args: []string{"version", "extra"}, code: 2, want: "accepts 0 arg(s), received 1"},
		{as: c, args: []string{"help", "queue"}},
		{as: c, args: []string{"help", "bogus"}, code: 2, want: `unknown command "bogus" for "fila"`},
		{as: c, args: []string{"completion", "bash"}},
		{as: c, args: []string{"completion", "nope"}, code: 2, want: `unknown command "nope" for "fila completion"`},
		{as: c, args: []string{"bogus"}, code: 2, want: `unknown command "bogus" for "fila"`},
		{as: c, args: []string{"--output", "yaml", "queue", "list"}, code: 2, want: `--output "yaml": want table or json`},
	})

	// What each command can end with, each checked above.
	for command, codes := range map[string][]int{
		"queue create": {0, 1, 2}, "queue list": {0, 1, 2}, "queue inspect": {0, 1, 2, 3}, "queue delete": {0, 1, 2, 3},
		"queue purge": {0, 1, 2, 3}, "queue peek": {0, 1, 2, 3},
		"enqueue": {0, 1, 2, 3}, "consume": {0, 1, 2, 3}, "redrive": {0, 1, 2, 3}, "explain": {0, 1, 2, 3},
		"config set": {0, 1, 2}, "config get": {0, 1, 2, 3}, "config list": {0, 1, 2}, "config delete": {0, 1, 2, 3},
		"auth create": {0, 1, 2}, "auth list": {0, 1, 2}, "auth acl": {0, 1, 2, 3}, "auth revoke": {0, 1, 2, 3},
		"cluster status": {0, 1}, "cluster move": {1, 2}, "cluster drain": {1, 2}, "cluster rebalance": {1, 2},
		"cluster add-node": {1, 2}, "cluster remove-node": {1, 2},
		"bench": {0, 1, 2}, "ping": {0, 1, 2}, "version": {0, 2}, "help": {0, 2}, "completion": {0, 2},
	} {
		got := slices.Sorted(slices.Values(seen[command]))
		if !slices.Equal(got, codes) {
			t.Errorf("fila %s ended with exit codes %v; want each of %v", command, got, codes)
		}
	}
}

// TestClusterExitCodes: in a cluster, moving a queue that does not exist
// exits 3, and the cluster commands' other codes hold there too.
func TestClusterExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fila-server processes")
	}
	cl := filatest.StartCluster(t, 3, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10"))
	all := &cli{t: t, addr: cl.Addrs()}
	// The meta group elects its leader first.
	all.retry("queue", "create", "orders")
	seen := runExitCases(t, []exitCase{
		{as: all, args: []string{"cluster", "status"}},
		{as: all, args: []string{"cluster", "move", "nope", "--to", "1,2"}, code: 3, want: "fila: cluster move nope: queue not found", jsonCode: "QUEUE_NOT_FOUND"},
		{as: all, args: []string{"cluster", "move", "orders", "--to", "1,x"}, code: 2, want: `--to "1,x": "x" is not a node ID`},
		{as: all, args: []string{"cluster", "move", "orders", "--to", "9"}, code: 1, want: "fila: cluster move orders: ", jsonCode: "INVALID_ARGUMENT"},
		{as: all, args: []string{"cluster", "drain", "9"}, code: 1, want: "fila: cluster drain 9: not a member of the cluster: invalid argument", jsonCode: "INVALID_ARGUMENT"},
		{as: all, args: []string{"cluster", "remove-node", "9"}, code: 1, want: "fila: cluster remove-node 9: ", jsonCode: "INVALID_ARGUMENT"},
	})
	if got := slices.Sorted(slices.Values(seen["cluster move"])); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("fila cluster move ended with exit codes %v; want each of 1, 2, 3", got)
	}
}

// TestExitCodesDocumented: fila --help lists the exit codes, and they are
// the ones the CLI returns (cmd.Exit...), each with what it means.
func TestExitCodesDocumented(t *testing.T) {
	srv := filatest.Start(t)
	help := newCLI(t, srv).ok("--help")
	_, table, ok := strings.Cut(help, "Exit codes")
	if !ok {
		t.Fatalf("fila --help does not list the exit codes:\n%s", help)
	}
	documented := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^  (\d)  (.+)$`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		documented[n] = m[2]
	}
	for code, means := range map[int]string{
		cmd.ExitOK:       "success",
		cmd.ExitFailure:  "failed",
		cmd.ExitUsage:    "usage",
		cmd.ExitNotFound: "does not exist",
	} {
		if !strings.Contains(documented[code], means) {
			t.Errorf("fila --help: exit code %d is documented as %q; want it to say %q", code, documented[code], means)
		}
	}
	if len(documented) != 4 {
		t.Errorf("fila --help documents %d exit codes (%v); want %s", len(documented), documented, fmt.Sprint([]int{cmd.ExitOK, cmd.ExitFailure, cmd.ExitUsage, cmd.ExitNotFound}))
	}
}
