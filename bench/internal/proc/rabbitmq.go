package proc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	cookie := make([]byte, 16)
	rand.Read(cookie)
	files := []struct {
		name, text string
		mode       os.FileMode
	}{
		{"rabbitmq.conf", RabbitMQConfig, 0o644},
		{"advanced.config", "[].\n", 0o644},
		{"enabled_plugins", "[].\n", 0o644},
		{"rabbitmq-env.conf", "", 0o644},
		{".erlang.cookie", hex.EncodeToString(cookie), 0o400},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		os.Remove(p) // a cookie left read-only
		if err := os.WriteFile(p, []byte(f.text), f.mode); err != nil {
			return nil, err
		}
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
	cmd := exec.Command("/bin/sh", "-c", launch, "rabbitmq", epmd, strconv.Itoa(epmdPort), script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(),
		"HOME="+dir,
		"RABBITMQ_NODENAME=filacompare-"+strconv.Itoa(os.Getpid())+"@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	s, err := spawn(&Server{Name: "rabbitmq", cmd: cmd, group: true, vm: "beam.smp"}, func(string) {})
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", amqpPort)
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
