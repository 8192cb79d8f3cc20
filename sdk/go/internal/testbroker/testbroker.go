// Package testbroker runs real fila-server processes for the SDK's
// tests, without depending on the broker's module: the binary is
// $FILA_TEST_SERVER_BIN, which the tests' TestMain sets (building
// fila-server when it is not given). Each server listens on a free
// 127.0.0.1 port, with its data in a temporary directory.
//
//	srv := testbroker.Start(t)
//	client, err := fila.Connect(ctx, srv.Addr)
//	srv.Kill()       // SIGKILL, as a crash
//	srv.Restart(t)   // same data directory, same address
package testbroker

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinEnv is the environment variable that names the fila-server binary.
const BinEnv = "FILA_TEST_SERVER_BIN"

// Server is a running (or stopped) fila-server process.
type Server struct {
	// Addr is the host:port the server listens on.
	Addr string
	// DataDir is its storage directory.
	DataDir string
	// Env is extra environment (KEY=value) given to every start.
	Env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited
	log  []string      // its stderr, across restarts (the last maxLog lines)
}

// maxLog is how many lines of a server's stderr are kept.
const maxLog = 5000

// An Option configures Start.
type Option func(*Server)

// WithEnv adds environment variables, such as
// "FILA_QUEUE_VISIBILITY_TIMEOUT=1s".
func WithEnv(kv ...string) Option { return func(s *Server) { s.Env = append(s.Env, kv...) } }

// Start starts a server and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	// Not "127.0.0.1:0": Restart binds the same address again.
	s := &Server{Addr: freePort(t), DataDir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	s.start(t)
	t.Cleanup(func() {
		s.Stop(t)
		if bad := s.undeclared(); bad != "" {
			t.Errorf("fila-server answered with codes the spec does not declare for their operations:\n%s", bad)
		}
		if t.Failed() {
			t.Logf("fila-server log:\n%s", s.Log())
		}
	})
	return s
}

// listenRE finds the address in the line fila-server logs once it
// listens, in the text or the JSON log format.
var listenRE = regexp.MustCompile(`msg="fila-server listening" addr=(\S+)|"msg":"fila-server listening","addr":"([^"]+)"`)

// startWait bounds the wait for a server to listen.
const startWait = 60 * time.Second

func (s *Server) start(t testing.TB) {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Fatalf("$%s is not set: it names the fila-server binary the tests run", BinEnv)
	}
	cmd := exec.Command(bin)
	cmd.Dir = s.DataDir
	cmd.Env = append(os.Environ(),
		"FILA_SERVER_LISTEN_ADDR="+s.Addr,
		"FILA_STORAGE_DATA_DIR="+s.DataDir,
		"FILA_SERVER_NODE_ID=test",
		"FILA_LOG_LEVEL=info",
	)
	cmd.Env = append(cmd.Env, s.Env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fila-server: %v", err)
	}
	done := make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.addLog(line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1] + m[2]:
				default:
				}
			}
		}
		// Every line is in the log once the process is done.
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	select {
	case a := <-addr:
		s.mu.Lock()
		s.Addr = a
		s.mu.Unlock()
	case <-done:
		t.Fatalf("fila-server exited at start (%v):\n%s", cmd.ProcessState, s.Log())
	case <-time.After(startWait):
		s.Kill()
		t.Fatalf("fila-server did not listen within %v:\n%s", startWait, s.Log())
	}
}

// Kill stops the server with SIGKILL, as a crash, and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Stop stops the server with SIGTERM (a graceful shutdown) and waits up to
// 30s, then kills it.
func (s *Server) Stop(t testing.TB) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.Kill()
		t.Errorf("fila-server did not stop in 30s after SIGTERM; killed it")
	}
}

// Restart starts the server again on the same data directory and address
// (after Kill or Stop).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.start(t)
}

// Log returns what the server wrote to stderr, across restarts.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

func (s *Server) addLog(line string) {
	s.mu.Lock()
	s.log = append(s.log, line)
	if len(s.log) > maxLog {
		s.log = s.log[len(s.log)-maxLog:]
	}
	s.mu.Unlock()
}

// UndeclaredCodeMsg is the message fila-server logs, at level ERROR, when
// it answers a request with a code the spec does not declare for its
// operation (a bug): every test that runs a Server fails on it.
const UndeclaredCodeMsg = "answer code not declared for the operation"

// undeclared returns the log lines of answers with undeclared codes.
func (s *Server) undeclared() string {
	var bad []string
	for _, line := range strings.Split(s.Log(), "\n") {
		// The text and the JSON log formats.
		if strings.Contains(line, `msg="`+UndeclaredCodeMsg+`"`) || strings.Contains(line, `"msg":"`+UndeclaredCodeMsg+`"`) {
			bad = append(bad, line)
		}
	}
	return strings.Join(bad, "\n")
}

// freePort returns a 127.0.0.1 address (host:port) whose port was free a
// moment ago, for a server that restarts on the same address. The port
// comes from below the kernel's ephemeral range (on Linux,
// /proc/sys/net/ipv4/ip_local_port_range; 32768 when it cannot be read):
// a port from inside it, as "127.0.0.1:0" picks, can be taken as the
// source port of an outgoing connection while the server is down for a
// restart.
func freePort(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatalf("no free port of 127.0.0.1 in [%d, %d)", lo, hi)
	return ""
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 11000 {
		return fallback
	}
	return p
}
