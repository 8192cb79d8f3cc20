// Package filatest runs a real fila-server process for tests: built once
// per test binary (or taken from $FILA_TEST_SERVER_BIN), listening on a free
// 127.0.0.1 port, with its data in a temporary directory.
//
//	srv := filatest.Start(t)
//	client, err := fila.Connect(ctx, srv.Addr)
//	srv.Kill()       // SIGKILL, as a crash
//	srv.Restart(t)   // same data directory, same address
package filatest

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a running (or stopped) fila-server process.
type Server struct {
	// Addr is the host:port the server listens on.
	Addr string
	// DataDir is its storage directory.
	DataDir string
	// Env is extra environment (KEY=value) given to every start.
	Env []string
	// Bin is the fila-server binary; empty means Binary's.
	Bin string

	mu   sync.Mutex
	proc *Proc
	log  *Log
}

// An Option configures Start.
type Option func(*Server)

// WithEnv adds environment variables, such as
// "FILA_QUEUE_VISIBILITY_TIMEOUT=1s".
func WithEnv(kv ...string) Option { return func(s *Server) { s.Env = append(s.Env, kv...) } }

// WithBinary runs the fila-server binary at path instead of Binary's (a
// build with fault injection, say).
func WithBinary(path string) Option { return func(s *Server) { s.Bin = path } }

// WithDataDir uses dir instead of a fresh temporary directory.
func WithDataDir(dir string) Option { return func(s *Server) { s.DataDir = dir } }

// A build is a fila-server binary built once per test process.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	plainBuild, faultBuild, raceFaultBuild build
)

// binary returns $env if set, else b's binary, built once with the go
// build flags given.
func (b *build) binary(t testing.TB, env string, flags ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "fila-server-bin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "fila-server")
		args := append([]string{"build", "-o", b.path}, flags...)
		args = append(args, "github.com/fila-mq/fila/broker/cmd/fila-server")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s fila-server: %v\n%s", strings.Join(flags, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Binary returns the path of a fila-server binary: $FILA_TEST_SERVER_BIN if set,
// else one built once for this test process (with -race when the test
// binary is race-built).
func Binary(t testing.TB) string {
	t.Helper()
	if raceBuild {
		return plainBuild.binary(t, "FILA_TEST_SERVER_BIN", "-race")
	}
	return plainBuild.binary(t, "FILA_TEST_SERVER_BIN")
}

// FaultBinary returns a fila-server built with the filafaults tag (fault
// injection: a failing fsync, an isolated peer transport) and without the
// race detector: $FILA_TEST_FAULTS_SERVER_BIN if set, else one built once
// for this test process.
func FaultBinary(t testing.TB) string {
	t.Helper()
	return faultBuild.binary(t, "FILA_TEST_FAULTS_SERVER_BIN", "-tags", "filafaults")
}

// RaceFaultBinary returns a fila-server built with -race and the
// filafaults tag: $FILA_TEST_RACE_SERVER_BIN if set, else one built once
// for this test process.
func RaceFaultBinary(t testing.TB) string {
	t.Helper()
	return raceFaultBuild.binary(t, "FILA_TEST_RACE_SERVER_BIN", "-race", "-tags", "filafaults")
}

// RaceBuild reports whether the test binary is built with the race
// detector (and Binary's fila-server with it): load tests skip then, as
// the detector's slowdown and memory would be what they measure.
func RaceBuild() bool { return raceBuild }

// Start starts a server and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	// Not "127.0.0.1:0": Restart binds the same address again (FreePorts).
	s := &Server{Addr: FreePorts(t, 1)[0]}
	for _, o := range opts {
		o(s)
	}
	if s.DataDir == "" {
		s.DataDir = t.TempDir()
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

// UndeclaredCodeMsg is the message fila-server logs, at level ERROR, when
// it answers a request with a code the spec does not declare for its
// operation (a bug): every test that runs a Server fails on it. It is
// the server package's UndeclaredCodeMsg.
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

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	if s.log == nil {
		s.log = NewLog(5000)
	}
	lb := s.log
	s.mu.Unlock()
	bin := s.Bin
	if bin == "" {
		bin = Binary(t)
	}
	p, err := StartProc(ProcConfig{Bin: bin, DataDir: s.DataDir, Listen: s.Addr, Env: s.Env, Log: lb, Wait: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr == "" {
		t.Fatalf("fila-server exited at start:\n%s", lb)
	}
	s.mu.Lock()
	s.proc = p
	s.Addr = p.Addr
	s.mu.Unlock()
}

// Kill stops the server with SIGKILL, as a crash, and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Stop stops the server with SIGTERM (a graceful shutdown) and waits up to
// 30s, then kills it.
func (s *Server) Stop(t testing.TB) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil && !p.Stop(30*time.Second) {
		t.Errorf("fila-server did not stop in 30s after SIGTERM; killed it")
	}
}

// Pause stops the server's process with SIGSTOP, as a process the
// operating system stops scheduling (a long GC pause, a VM paused): it
// keeps its connections and its state, and answers nothing, until
// Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(s.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Resume continues a process stopped by Pause, with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(s.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Wait waits up to d for the server's process to exit on its own, and
// returns its exit code; the error says it did not exit in time.
func (s *Server) Wait(d time.Duration) (int, error) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p.Wait(d)
}

// Restart starts the server again on the same data directory and address
// (after Kill or Stop).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.start(t)
}

// Pid returns the process ID.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.Pid()
}

// RSS returns the process's resident set size in bytes (Linux).
func (s *Server) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", s.Pid())
}

// RaceBuilt reports whether the server's binary was built with the race
// detector, which multiplies its memory use: tests that bound the
// broker's RSS check the bound only when it is not.
func (s *Server) RaceBuilt(t testing.TB) bool {
	t.Helper()
	info, err := buildinfo.ReadFile(Binary(t))
	if err != nil {
		t.Fatalf("read the build info of fila-server: %v", err)
	}
	for _, st := range info.Settings {
		if st.Key == "-race" && st.Value == "true" {
			return true
		}
	}
	return false
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// CPUTime returns the CPU time the process has used so far, user and
// system (Linux).
func (s *Server) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Pid()))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", s.Pid(), b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", s.Pid(), b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", s.Pid(), b)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// Log returns what the server wrote to stderr, across restarts.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}
