// Package proc builds and runs the broker processes the comparison
// harness measures: fila-server, nats-server and, where it is installed,
// rabbitmq-server, each its own process on 127.0.0.1 with its storage in
// a directory of the caller's, alone (Server) or as a cluster of nodes
// (Cluster), and reads their memory use from /proc.
package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build runs "go build -o out pkg" in dir (a directory of the module
// whose requirements resolve pkg) and returns out.
func Build(dir, pkg, out string) (string, error) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("proc: go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// A Server is a running broker process.
type Server struct {
	// Name is what the harness calls it, such as "nats (sync always)".
	Name string
	// Addr is the host:port it listens on.
	Addr string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  strings.Builder

	// group is set when cmd leads a process group of its own, which Stop
	// ends as a whole (rabbitmq-server: a shell script, epmd and the
	// Erlang VM).
	group bool
	// vm, if set, is the command name (comm) of the process in the group
	// whose memory Memory reports, such as "beam.smp"; else cmd's own.
	vm string
}

// StartFila starts bin (a fila-server) on a free port of 127.0.0.1 with
// its data in dataDir, and waits until it listens. env adds FILA_*
// settings.
func StartFila(bin, dataDir string, env ...string) (*Server, error) {
	cmd := exec.Command(bin)
	cmd.Dir = dataDir
	cmd.Env = append(os.Environ(),
		"FILA_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"FILA_STORAGE_DATA_DIR="+filepath.Join(dataDir, "data"),
		"FILA_SERVER_NODE_ID=bench",
		"FILA_LOG_LEVEL=info",
	)
	cmd.Env = append(cmd.Env, env...)
	return start("fila", cmd, filaListening)
}

var filaListeningRE = regexp.MustCompile(`msg="fila-server listening" addr=(\S+)`)

// filaListening returns the address in fila-server's "listening" log
// line, or "" for any other line.
func filaListening(line string) string {
	if m := filaListeningRE.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// StartNATS starts bin (a nats-server) with JetStream, its store in
// storeDir and, if syncAlways, sync_interval: always (an fsync per
// write); else the default (fsync every two minutes). It listens on a
// free port of 127.0.0.1 and returns once it accepts connections.
func StartNATS(name, bin, storeDir string, syncAlways bool) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startNATS(name, bin, NATSNode{Port: port, StoreDir: storeDir, SyncAlways: syncAlways})
}

// startNATS writes n's configuration into n.StoreDir as nats.conf and
// starts bin with it, returning once the server accepts connections.
func startNATS(name, bin string, n NATSNode) (*Server, error) {
	if err := os.MkdirAll(n.StoreDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(n.StoreDir, "nats.conf")
	if err := os.WriteFile(path, []byte(n.Config()), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", path)
	addr := fmt.Sprintf("127.0.0.1:%d", n.Port)
	return start(name, cmd, func(line string) string {
		if strings.Contains(line, "Server is ready") {
			return addr
		}
		return ""
	})
}

// start runs cmd, scanning its output with ready until it returns the
// address, for at most a minute.
func start(name string, cmd *exec.Cmd, ready func(line string) string) (*Server, error) {
	addr := make(chan string, 1)
	found := false
	s, err := spawn(&Server{Name: name, cmd: cmd}, func(line string) {
		if !found {
			if a := ready(line); a != "" {
				found = true
				addr <- a
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return s.await(addr)
}

// spawn starts s.cmd with its standard output and error collected into
// s's log, each line also passed to line (on one goroutine, in order).
func spawn(s *Server, line func(string)) (*Server, error) {
	s.done = make(chan struct{})
	cmd := s.cmd
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", s.Name, err)
	}
	read := make(chan struct{}) // closed once every line is in the log
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			s.mu.Lock()
			if s.log.Len() < 1<<20 {
				s.log.WriteString(l + "\n")
			}
			s.mu.Unlock()
			line(l)
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		// Done only once the output is logged, so that a process that
		// exits at once is reported with what it printed.
		<-read
		close(s.done)
	}()
	return s, nil
}

// await returns s once addr yields its address; it stops s and fails if
// the process exits first or a minute passes.
func (s *Server) await(addr <-chan string) (*Server, error) {
	select {
	case a := <-addr:
		s.Addr = a
		return s, nil
	case <-s.done:
		s.Stop() // the rest of a process group
		return nil, fmt.Errorf("proc: %s exited at start:\n%s", s.Name, s.Log())
	case <-time.After(time.Minute):
		s.Stop()
		return nil, fmt.Errorf("proc: %s did not start in a minute:\n%s", s.Name, s.Log())
	}
}

// Log returns what the process has written (up to 1 MiB).
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Stop sends SIGTERM, waits up to 30s, then kills the process. A
// process group started as one (StartRabbitMQ) is signalled as a whole,
// and Stop returns once none of its processes is left.
func (s *Server) Stop() {
	if s.group {
		s.stopGroup()
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *Server) stopGroup() {
	pgid := s.cmd.Process.Pid
	gone := func(d time.Duration) bool {
		for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
			select {
			case <-s.done:
				if len(groupMembers(pgid)) == 0 {
					return true
				}
			default:
			}
			if time.Now().After(end) {
				return false
			}
		}
	}
	if gone(0) {
		return // already stopped: pgid may name another group by now
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	if !gone(30 * time.Second) {
		syscall.Kill(-pgid, syscall.SIGKILL)
		gone(10 * time.Second)
	}
}

// groupMembers returns the live (not zombie) processes of process group
// pgid, by pid, with their command names, from /proc/<pid>/stat.
func groupMembers(pgid int) map[int]string {
	m := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			m[pid] = string(b[open+1 : end])
		}
	}
	return m
}

// Memory is a process's resident set size now and at its peak, bytes.
type Memory struct {
	RSS, PeakRSS int64
}

// Memory reads VmRSS and VmHWM from /proc/<pid>/status (Linux) of the
// broker's process: the one started, or for RabbitMQ the Erlang VM
// (beam.smp) in its process group. It fails once that process has
// exited.
func (s *Server) Memory() (Memory, error) {
	pid := s.cmd.Process.Pid
	if s.vm != "" {
		pid = 0
		for p, comm := range groupMembers(s.cmd.Process.Pid) {
			if comm == s.vm {
				pid = p
			}
		}
		if pid == 0 {
			return Memory{}, fmt.Errorf("proc: %s memory: no %s process", s.Name, s.vm)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("proc: %s memory: %w", s.Name, err)
	}
	var m Memory
	for _, line := range strings.Split(string(b), "\n") {
		for key, dst := range map[string]*int64{"VmRSS:": &m.RSS, "VmHWM:": &m.PeakRSS} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					*dst = kb << 10
				}
			}
		}
	}
	return m, nil
}

// Run runs a command to completion with ctx, returning its standard
// output; its standard error is included in the error.
func Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("proc: %s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func freePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// freePorts returns n distinct ports of 127.0.0.1 that were free a
// moment ago. They come from below the kernel's ephemeral range (Linux's
// ip_local_port_range), so that no outgoing connection of the servers
// started on them (a cluster's nodes dial each other) takes one as its
// source port before the server meant for it binds it.
func freePorts(n int) ([]int, error) {
	lo, hi := 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if p, err := strconv.Atoi(f[0]); err == nil && p > lo+1000 {
				hi = p
			}
		}
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("proc: no %d free ports of 127.0.0.1 in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		defer l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

// FsyncRate measures the disk under dir: 1 KiB written and fsynced, over
// and over, for d; it returns fsyncs per second.
func FsyncRate(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1024)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
