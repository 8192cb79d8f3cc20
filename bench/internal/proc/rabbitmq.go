package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNoRabbitMQ is returned by StartRabbitMQ when rabbitmq-server is not
// installed.
var ErrNoRabbitMQ = errors.New("rabbitmq-server not installed (apt-get install rabbitmq-server)")

// rabbitMQDirs are where packages install rabbitmq-server, after PATH:
// Debian's and the RPM's real script, then their wrapper.
var rabbitMQDirs = []string{"/usr/lib/rabbitmq/bin", "/usr/sbin"}

// LookRabbitMQ returns the rabbitmq-server script to run: the one on
// PATH, else in /usr/lib/rabbitmq/bin or /usr/sbin. Debian's and the
// RPM's /usr/sbin/rabbitmq-server is a wrapper that, run as root,
// re-runs the script as the rabbitmq user with su (dropping the
// environment this package sets); it is replaced by the script it wraps,
// which sits beside the wrapper. The error is ErrNoRabbitMQ.
func LookRabbitMQ() (string, error) {
	var cands []string
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		cands = append(cands, p)
	}
	for _, d := range rabbitMQDirs {
		cands = append(cands, filepath.Join(d, "rabbitmq-server"))
	}
	for _, p := range cands {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if filepath.Base(real) == "rabbitmq-script-wrapper" {
			real = filepath.Join(filepath.Dir(real), "rabbitmq-server")
			if _, err := os.Stat(real); err != nil {
				continue
			}
		}
		if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return real, nil
		}
	}
	return "", ErrNoRabbitMQ
}

// lookEpmd returns Erlang's port mapper daemon: on PATH, else beside the
// erl on PATH or in its runtime's directory (<root>/bin/erl,
// <root>/erts-<version>/bin/epmd).
func lookEpmd() (string, error) {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p, nil
	}
	if erl, err := exec.LookPath("erl"); err == nil {
		if real, err := filepath.EvalSymlinks(erl); err == nil {
			bin := filepath.Dir(real)
			m, _ := filepath.Glob(filepath.Join(filepath.Dir(bin), "erts-*", "bin", "epmd"))
			for _, p := range append([]string{filepath.Join(bin, "epmd")}, m...) {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		}
	}
	return "", errors.New("proc: rabbitmq: epmd not found (it comes with Erlang)")
}

// RabbitMQConfig is the rabbitmq.conf StartRabbitMQ writes. The two
// resource alarms block every publisher while they are set, so a run
// that raised one would measure the alarm: the disk alarm is at 50 MB of
// free space (RabbitMQ's default, stated so that no other configuration
// raises it; a benchmark writing gigabytes needs far more free space than
// that anyway), and the memory alarm at 40 % of the machine's memory
// (RabbitMQ's default; 9.6 GiB on a 24 GiB machine, several times what
// these workloads take). Logs go to standard output, without colour,
// where Server.Log keeps them.
const RabbitMQConfig = `disk_free_limit.absolute = 50MB
vm_memory_high_watermark.relative = 0.4
log.file = false
log.console = true
log.console.level = info
log.console.use_colors = off
`

// StartRabbitMQ starts rabbitmq-server (see LookRabbitMQ) as a node of
// its own and returns once an AMQP client can connect to it as guest;
// the error is ErrNoRabbitMQ if it is not installed. Everything the
// node keeps is under dir: its database (quorum queues' logs included),
// its configuration (RabbitMQConfig; no plugins), its Erlang cookie (HOME
// is dir) and its crash dump. The node is named filacompare-<pid>@localhost
// and listens on 127.0.0.1 only: AMQP, Erlang distribution and a port
// mapper (epmd) of its own, each on a free port, so that nothing is
// shared with another node or a later run. The script, epmd and the
// Erlang VM form one process group, which Stop ends; Memory reports the
// VM (beam.smp).
func StartRabbitMQ(dir string) (*Server, error) {
	script, err := LookRabbitMQ()
	if err != nil {
		return nil, err
	}
	epmd, err := lookEpmd()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	n := rabbitNode{
		dir:      dir,
		name:     "filacompare-" + strconv.Itoa(os.Getpid()) + "@localhost",
		amqpPort: ports[0], distPort: ports[1], epmdPort: ports[2],
	}
	if err := n.writeFiles(newCookie()); err != nil {
		return nil, err
	}
	// The port mapper starts first, not as a daemon and so in the group,
	// its output in a file (were it on the pipe, the pipe would stay
	// open after the node exits); the script is exec'd once it answers.
	const launch = `"$1" -port "$2" -address 127.0.0.1 >epmd.log 2>&1 &
i=0
until "$1" -port "$2" -names >/dev/null 2>&1; do
	i=$((i+1)); [ $i -lt 200 ] || { echo "epmd did not start"; exit 1; }
	sleep 0.05
done
exec "$3"`
	return n.start("rabbitmq", exec.Command("/bin/sh", "-c", launch, "rabbitmq", epmd, strconv.Itoa(n.epmdPort), script))
}

// rabbitNode is where a RabbitMQ node keeps everything, its name and its
// ports, all on 127.0.0.1.
type rabbitNode struct {
	dir      string
	name     string // such as filacompare-123@localhost
	amqpPort int
	distPort int // Erlang distribution
	epmdPort int // the port mapper the node registers with
}

// newCookie returns a random Erlang cookie.
func newCookie() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// writeFiles writes the node's configuration (RabbitMQConfig, no
// plugins, an empty rabbitmq-env.conf) and its Erlang cookie into its
// directory.
func (n rabbitNode) writeFiles(cookie string) error {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name, text string
		mode       os.FileMode
	}{
		{"rabbitmq.conf", RabbitMQConfig, 0o644},
		{"advanced.config", "[].\n", 0o644},
		{"enabled_plugins", "[].\n", 0o644},
		{"rabbitmq-env.conf", "", 0o644},
		{".erlang.cookie", cookie, 0o400},
	}
	for _, f := range files {
		p := filepath.Join(n.dir, f.name)
		os.Remove(p) // a cookie left read-only
		if err := os.WriteFile(p, []byte(f.text), f.mode); err != nil {
			return err
		}
	}
	return nil
}

// ctlEnv is the environment of the RabbitMQ tools run for the node
// (rabbitmqctl): its cookie (HOME), its port mapper, and its
// rabbitmq-env.conf instead of the system's.
func (n rabbitNode) ctlEnv() []string {
	return append(os.Environ(),
		"HOME="+n.dir,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"ERL_EPMD_PORT="+strconv.Itoa(n.epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

// start runs cmd (which execs the rabbitmq-server script) in the node's
// directory with the node's environment, as the leader of a process
// group, and returns once an AMQP client can connect as guest.
func (n rabbitNode) start(name string, cmd *exec.Cmd) (*Server, error) {
	cmd.Dir = n.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(n.ctlEnv(),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
	)
	s, err := spawn(&Server{Name: name, cmd: cmd, group: true, vm: "beam.smp"}, func(string) {})
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", n.amqpPort)
	ready := make(chan string, 1)
	go func() {
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			select {
			case <-s.done:
				return
			default:
			}
			if c, err := amqp.Dial("amqp://guest:guest@" + addr + "/"); err == nil {
				c.Close()
				ready <- addr
				return
			}
		}
	}()
	return s.await(ready)
}

// StartRabbitMQCluster starts n RabbitMQ nodes (see LookRabbitMQ) on
// 127.0.0.1 and joins them into one cluster, returning once node 1
// reports every node running; the error is ErrNoRabbitMQ if
// rabbitmq-server or the rabbitmqctl beside it is not installed. Node i
// (from 1) is named filacompare-<pid>-<i>@localhost and keeps everything
// under dir/node<i>, as a node of StartRabbitMQ does, with its own AMQP
// and Erlang distribution ports. The nodes share one Erlang cookie and
// one port mapper (epmd, on a free port, run as a process of its own and
// stopped after the nodes), through which they find each other. Each
// node starts alone, then nodes 2 to n join node 1 with rabbitmqctl
// (stop_app, join_cluster, start_app). Each node's script and Erlang VM
// form a process group, which Stop ends; Memory reports each VM.
func StartRabbitMQCluster(dir string, n int) (*Cluster, error) {
	script, err := LookRabbitMQ()
	if err != nil {
		return nil, err
	}
	ctl := filepath.Join(filepath.Dir(script), "rabbitmqctl")
	if st, err := os.Stat(ctl); err != nil || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w: no rabbitmqctl beside %s", ErrNoRabbitMQ, script)
	}
	epmd, err := lookEpmd()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1 + 2*n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: "rabbitmq", ctl: ctl}
	pm, err := startEpmd(epmd, dir, ports[0])
	if err != nil {
		return nil, err
	}
	c.helpers = append(c.helpers, pm)
	cookie := newCookie()
	nodes := make([]rabbitNode, n)
	c.rabbit = nodes
	for i := range nodes {
		nodes[i] = rabbitNode{
			dir:      filepath.Join(dir, "node"+strconv.Itoa(i+1)),
			name:     fmt.Sprintf("filacompare-%d-%d@localhost", os.Getpid(), i+1),
			amqpPort: ports[1+2*i], distPort: ports[2+2*i], epmdPort: ports[0],
		}
		if err := nodes[i].writeFiles(cookie); err != nil {
			c.Stop()
			return nil, err
		}
		s, err := nodes[i].start(fmt.Sprintf("rabbitmq node %d", i+1), exec.Command(script))
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := joinRabbitMQ(ctx, ctl, nodes, 30*time.Second); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w\n%s", err, c.Log())
	}
	return c, nil
}

// RabbitMQCtl runs rabbitmqctl against node i (from 0) of a cluster
// started by StartRabbitMQCluster, with that node's cookie and port
// mapper, and returns its standard output; args follow "-n <node>". The
// error includes its standard error.
func (c *Cluster) RabbitMQCtl(ctx context.Context, i int, args ...string) ([]byte, error) {
	if i < 0 || i >= len(c.rabbit) {
		return nil, fmt.Errorf("proc: rabbitmqctl: %s has no RabbitMQ node %d", c.Name, i)
	}
	n := c.rabbit[i]
	cmd := exec.CommandContext(ctx, c.ctl, append([]string{"-n", n.name}, args...)...)
	cmd.Dir = n.dir
	cmd.Env = n.ctlEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("proc: rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// startEpmd runs Erlang's port mapper (bin) on 127.0.0.1:port, in dir,
// and returns once it answers.
func startEpmd(bin, dir string, port int) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := strconv.Itoa(port)
	cmd := exec.Command(bin, "-port", p, "-address", "127.0.0.1")
	cmd.Dir = dir
	s, err := spawn(&Server{Name: "epmd", cmd: cmd}, func(string) {})
	if err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			select {
			case <-s.done:
				return
			default:
			}
			if exec.Command(bin, "-port", p, "-names").Run() == nil {
				ready <- "127.0.0.1:" + p
				return
			}
		}
	}()
	return s.await(ready)
}

// rabbitJoinSteps returns the rabbitmqctl calls that join every node of
// names after the first to the first one's cluster, in order: for each,
// stop_app, join_cluster and start_app. Each call is the index in names
// of the node it runs against (-n) and its arguments.
func rabbitJoinSteps(names []string) []rabbitStep {
	var steps []rabbitStep
	for i := 1; i < len(names); i++ {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", names[0]}, {"start_app"}} {
			steps = append(steps, rabbitStep{node: i, args: append([]string{"-n", names[i]}, args...)})
		}
	}
	return steps
}

// A rabbitStep is one rabbitmqctl call: the node (an index) whose
// environment it runs with, and its arguments.
type rabbitStep struct {
	node int
	args []string
}

// joinRabbitMQ joins nodes[1:] to nodes[0]'s cluster with rabbitmqctl
// (ctl; see rabbitJoinSteps), each call with its node's cookie and port
// mapper, then waits up to wait for nodes[0] to report every node
// running (cluster_status).
func joinRabbitMQ(ctx context.Context, ctl string, nodes []rabbitNode, wait time.Duration) error {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	run := func(node int, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, ctl, args...)
		cmd.Dir = nodes[node].dir
		cmd.Env = nodes[node].ctlEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("proc: rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out, nil
	}
	for _, st := range rabbitJoinSteps(names) {
		if _, err := run(st.node, st.args...); err != nil {
			return err
		}
	}
	var running []string
	for end := time.Now().Add(wait); ; time.Sleep(200 * time.Millisecond) {
		out, err := run(0, "-n", names[0], "cluster_status", "--formatter", "json")
		if err == nil {
			if running, err = rabbitRunningNodes(out); err == nil && containsAll(running, names) {
				return nil
			}
		}
		if time.Now().After(end) || ctx.Err() != nil {
			if err != nil {
				return err
			}
			return fmt.Errorf("proc: rabbitmq cluster: running nodes %v after %v; want %v", running, wait, names)
		}
	}
}

// rabbitRunningNodes returns the running nodes that
// "rabbitmqctl cluster_status --formatter json" printed.
func rabbitRunningNodes(out []byte) ([]string, error) {
	var st struct {
		Running []string `json:"running_nodes"`
	}
	// The tools may print a line of their own before the JSON.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("proc: rabbitmqctl cluster_status: %w: %q", err, out)
	}
	return st.Running, nil
}

// containsAll reports whether have holds every string of want.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
