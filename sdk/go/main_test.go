package fila_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestMain starts one fila-server for the package's examples, which read
// its address from FILA_ADDR as the CLI does. The binary is
// $FILA_TEST_SERVER_BIN or one built here; the tests' own servers
// (package testbroker) reuse it.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fila-sdk-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := os.Getenv("FILA_TEST_SERVER_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "fila-server")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/fila-mq/fila/broker/cmd/fila-server").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build fila-server: %v\n%s", err, out)
			return 1
		}
		os.Setenv("FILA_TEST_SERVER_BIN", bin)
	}
	stop, addr, err := startServer(bin, filepath.Join(dir, "data"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	os.Setenv("FILA_ADDR", addr)
	return m.Run()
}

var listening = regexp.MustCompile(`msg="fila-server listening" addr=(\S+)`)

// startServer runs bin on a free loopback port and returns a function
// that stops it, and its address.
func startServer(bin, data string) (stop func(), addr string, err error) {
	cmd := exec.Command(bin)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(),
		"FILA_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"FILA_STORAGE_DATA_DIR="+data,
		"FILA_SERVER_NODE_ID=example",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start fila-server: %w", err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	select {
	case addr = <-found:
		return stop, addr, nil
	case <-time.After(60 * time.Second):
		stop()
		return nil, "", fmt.Errorf("fila-server did not start listening in 60s")
	}
}
