package proc

import (
	"os/exec"
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
