package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// A Broker is a fila-server process started for a replay or a recording,
// listening on a free 127.0.0.1 port with its data in a temporary
// directory. It runs on filatest.Proc, the launcher Go tests use through
// filatest.Start; this is for the command, which has no testing.TB.
type Broker struct {
	// Addr is the host:port it listens on.
	Addr string

	proc *filatest.Proc
	dir  string
}

// StartBroker starts the fila-server binary bin with env (FILA_KEY=value)
// added to this process's environment, and waits up to 60s for it to
// listen.
func StartBroker(bin string, env []string) (*Broker, error) {
	dir, err := os.MkdirTemp("", "fila-conformance-data")
	if err != nil {
		return nil, err
	}
	p, err := filatest.StartProc(filatest.ProcConfig{
		Bin: bin, DataDir: dir, NodeID: "conformance", Env: env,
		Log: filatest.NewLog(10000), Wait: 60 * time.Second,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if p.Addr == "" {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("conformance: fila-server exited at start:\n%s", p.Log())
	}
	return &Broker{Addr: p.Addr, proc: p, dir: dir}, nil
}

// Log returns what the broker wrote to stderr.
func (b *Broker) Log() string { return b.proc.Log() }

// Stop stops the broker (SIGTERM, then SIGKILL after 10s) and removes its
// data.
func (b *Broker) Stop() {
	b.proc.Stop(10 * time.Second)
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
