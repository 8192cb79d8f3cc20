package filatest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcConfig says how StartProc starts a fila-server.
type ProcConfig struct {
	// Bin is the fila-server binary.
	Bin string
	// DataDir is its storage directory, and its working directory.
	DataDir string
	// Listen is the host:port it listens on; empty means a free port of
	// 127.0.0.1.
	Listen string
	// NodeID is its node ID; empty means "test".
	NodeID string
	// Env is environment (KEY=value) added after the launcher's own
	// settings, so it may override them.
	Env []string
	// Args are command-line arguments, such as "--listen", ADDR; flags
	// override Listen and DataDir, which are given as environment.
	Args []string
	// Log receives its stderr, line by line; nil means a new Log of up to
	// 5,000 lines. Share one across restarts to keep the whole story.
	Log *Log
	// Wait bounds the wait for it to listen or exit; zero means 2 minutes.
	Wait time.Duration
}

// A Proc is a fila-server process. It is what Start and the Server type
// run on, and what callers without a testing.TB (a command) use.
type Proc struct {
	// Addr is the host:port it listens on; empty if it exited before it
	// listened.
	Addr string

	cmd  *exec.Cmd
	done chan struct{}
	log  *Log
}

// listenRE finds the address in the line fila-server logs once it
// listens, in the text or the JSON log format.
var listenRE = regexp.MustCompile(`msg="fila-server listening" addr=(\S+)|"msg":"fila-server listening","addr":"([^"]+)"`)

// listenAddr returns the address line says fila-server listens on, or
// "" if it is not that line.
func listenAddr(line string) string {
	m := listenRE.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

// StartProc starts a fila-server and returns once it listens, or once it
// exits without listening (Addr is then empty and Wait gives its exit
// code). It fails if the process cannot start, or does neither within
// c.Wait (the process is then killed).
func StartProc(c ProcConfig) (*Proc, error) {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.NodeID == "" {
		c.NodeID = "test"
	}
	if c.Log == nil {
		c.Log = NewLog(5000)
	}
	if c.Wait == 0 {
		c.Wait = 2 * time.Minute
	}
	cmd := exec.Command(c.Bin, c.Args...)
	cmd.Dir = c.DataDir
	cmd.Env = append(os.Environ(),
		"FILA_SERVER_LISTEN_ADDR="+c.Listen,
		"FILA_STORAGE_DATA_DIR="+c.DataDir,
		"FILA_SERVER_NODE_ID="+c.NodeID,
		"FILA_LOG_LEVEL=info",
	)
	cmd.Env = append(cmd.Env, c.Env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fila-server: %w", err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), log: c.Log}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			if a := listenAddr(line); a != "" {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	go func() {
		// Every line is in the log once the process is done.
		<-scanned
		cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addr = <-addr:
		return p, nil
	case <-p.done:
		return p, nil
	case <-time.After(c.Wait):
		p.Kill()
		return nil, fmt.Errorf("fila-server neither listened nor exited within %v:\n%s", c.Wait, p.log)
	}
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill stops the process with SIGKILL, as a crash, and waits for it to
// exit.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop stops the process with SIGTERM (a graceful shutdown) and waits up
// to grace for it to exit, then kills it. It reports whether the process
// exited within grace.
func (p *Proc) Stop(grace time.Duration) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}

// ErrStillRunning is returned by Wait when the process has not exited in
// time.
var ErrStillRunning = errors.New("filatest: fila-server still running")

// Wait waits up to d for the process to exit and returns its exit code.
func (p *Proc) Wait(d time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		return 0, ErrStillRunning
	}
}

// Log returns what the process wrote to stderr (with what the Log held
// before, if it was shared).
func (p *Proc) Log() string { return p.log.String() }

// A Log keeps the last lines a fila-server wrote to stderr.
type Log struct {
	mu    sync.Mutex
	max   int
	lines []string
}

// NewLog returns a Log that keeps the last max lines.
func NewLog(max int) *Log { return &Log{max: max} }

func (l *Log) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	if len(l.lines) > l.max {
		l.lines = l.lines[len(l.lines)-l.max:]
	}
	l.mu.Unlock()
}

// String returns the lines kept, joined by newlines.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
