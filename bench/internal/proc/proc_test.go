package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo booting; echo 'ready at 127.0.0.1:4222'; exec sleep 60")
	s, err := start("sleeper", cmd, func(line string) string {
		if a, ok := strings.CutPrefix(line, "ready at "); ok {
			return a
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr != "127.0.0.1:4222" {
		t.Errorf("start: Addr = %q; want 127.0.0.1:4222", s.Addr)
	}
	m, err := s.Memory()
	if err != nil || m.RSS <= 0 || m.PeakRSS < m.RSS {
		t.Errorf("Memory() = %+v, %v; want 0 < RSS ≤ PeakRSS", m, err)
	}
	s.Stop()
	select {
	case <-s.done:
	default:
		t.Error("Stop returned with the process running")
	}
	if !strings.Contains(s.Log(), "booting") {
		t.Errorf("Log() = %q; want the process's output", s.Log())
	}
}

func TestStartExits(t *testing.T) {
	_, err := start("quitter", exec.Command("sh", "-c", "echo no luck; exit 3"), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "no luck") {
		t.Errorf("start(exits at once) = %v; want an error with its output", err)
	}
}

func TestFsyncRate(t *testing.T) {
	r, err := FsyncRate(t.TempDir(), 20*time.Millisecond)
	if err != nil || r <= 0 {
		t.Errorf("FsyncRate = %v, %v; want a positive rate", r, err)
	}
}

// TestStartRabbitMQ starts a RabbitMQ node twice in a row, checks that
// Memory reports the Erlang VM and that Stop leaves no process of the
// group behind. It is skipped where rabbitmq-server is not installed.
func TestStartRabbitMQ(t *testing.T) {
	if _, err := LookRabbitMQ(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	for run := 1; run <= 2; run++ {
		s, err := StartRabbitMQ(t.TempDir())
		if err != nil {
			t.Fatalf("run %d: StartRabbitMQ: %v", run, err)
		}
		pgid := s.cmd.Process.Pid
		m, err := s.Memory()
		if err != nil || m.PeakRSS < 32<<20 {
			t.Errorf("run %d: Memory() = %+v, %v; want the Erlang VM's, at least 32 MiB", run, m, err)
		}
		if members := groupMembers(pgid); len(members) < 3 {
			t.Errorf("run %d: process group = %v; want the script, epmd and beam.smp", run, members)
		}
		s.Stop()
		if members := groupMembers(pgid); len(members) > 0 {
			t.Errorf("run %d: after Stop, process group = %v; want none", run, members)
		}
	}
}

func TestLookRabbitMQ(t *testing.T) {
	saved := rabbitMQDirs
	t.Cleanup(func() { rabbitMQDirs = saved })

	// Debian's layout: sbin/rabbitmq-server -> lib/rabbitmq-script-wrapper,
	// beside it lib/rabbitmq-server, the script to run.
	root := t.TempDir()
	lib, sbin := filepath.Join(root, "lib"), filepath.Join(root, "sbin")
	for _, d := range []string{lib, sbin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"rabbitmq-script-wrapper", "rabbitmq-server"} {
		if err := os.WriteFile(filepath.Join(lib, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../lib/rabbitmq-script-wrapper", filepath.Join(sbin, "rabbitmq-server")); err != nil {
		t.Fatal(err)
	}
	rabbitMQDirs = nil
	t.Setenv("PATH", sbin)
	if got, err := LookRabbitMQ(); err != nil || got != filepath.Join(lib, "rabbitmq-server") {
		t.Errorf("LookRabbitMQ() through the wrapper = %q, %v; want %q", got, err, filepath.Join(lib, "rabbitmq-server"))
	}

	t.Setenv("PATH", t.TempDir())
	if _, err := LookRabbitMQ(); !errors.Is(err, ErrNoRabbitMQ) {
		t.Errorf("LookRabbitMQ() with none installed = %v; want ErrNoRabbitMQ", err)
	}
	if _, err := StartRabbitMQ(t.TempDir()); !errors.Is(err, ErrNoRabbitMQ) {
		t.Errorf("StartRabbitMQ() with none installed = %v; want ErrNoRabbitMQ", err)
	}
}
