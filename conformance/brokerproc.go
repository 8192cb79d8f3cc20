package conformance

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Broker is a fila-server process started for a replay or a recording,
// listening on a free 127.0.0.1 port with its data in a temporary
// directory. (Go tests use broker/filatest instead; this is for the
// command, which has no testing.TB.)
type Broker struct {
	// Addr is the host:port it listens on.
	Addr string

	cmd  *exec.Cmd
	dir  string
	done chan struct{}

	mu  sync.Mutex
	log []string
}

var listenLine = regexp.MustCompile(`msg="fila-server listening" addr=(\S+)`)

// StartBroker starts the fila-server binary bin with env (FILA_KEY=value)
// added to this process's environment, and waits up to 60s for it to
// listen.
func StartBroker(bin string, env []string) (*Broker, error) {
	dir, err := os.MkdirTemp("", "fila-conformance-data")
	if err != nil {
		return nil, err
	}
	b := &Broker{dir: dir, done: make(chan struct{})}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"FILA_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"FILA_STORAGE_DATA_DIR="+dir,
		"FILA_SERVER_NODE_ID=conformance",
		"FILA_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("conformance: start %s: %w", bin, err)
	}
	b.cmd = cmd
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			b.mu.Lock()
			if len(b.log) < 10000 {
				b.log = append(b.log, line)
			}
			b.mu.Unlock()
			if m := listenLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		cmd.Wait()
		close(b.done)
	}()
	select {
	case b.Addr = <-addr:
		return b, nil
	case <-b.done:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("conformance: fila-server exited at start:\n%s", b.Log())
	case <-time.After(60 * time.Second):
		b.Stop()
		return nil, fmt.Errorf("conformance: fila-server did not listen within 60s:\n%s", b.Log())
	}
}

// Log returns what the broker wrote to stderr.
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.log, "\n")
}

// Stop stops the broker (SIGTERM, then SIGKILL after 10s) and removes its
// data.
func (b *Broker) Stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
	os.RemoveAll(b.dir)
}

// BuildBroker builds fila-server into dir with the go command (inside the
// repository's workspace) and returns its path.
func BuildBroker(dir string) (string, error) {
	bin := filepath.Join(dir, "fila-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fila-mq/fila/broker/cmd/fila-server").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("conformance: go build fila-server: %v\n%s", err, out)
	}
	return bin, nil
}

// BrokerKey names the broker configuration t needs: transcripts with the
// same key can share a broker, unless t is Fresh.
func (t *Transcript) BrokerKey() string {
	return strings.Join(t.BrokerEnv, " ")
}
