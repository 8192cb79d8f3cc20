package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// SkipStatus is the exit status by which a client program says it does not
// implement a transcript's scenario (as automake's test drivers do).
const SkipStatus = 77

// ExecClient checks a client program against t in client mode: it starts
// the fake broker on a free port of 127.0.0.1, runs `cmdline <name> <addr>`
// (with sh -c; name is the transcript's, such as hotpath/enqueue_consume)
// and serves t to the connection the program opens, as ServeClient does.
//
// It returns a *Failure for the bytes that differ, or for a program that
// exits with another status than 0; an error wrapping ErrSkipped when the
// program exits with SkipStatus.
func ExecClient(ctx context.Context, t *Transcript, cmdline string, opts ClientOptions) error {
	if !t.Applies("client") {
		return nil
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	var output bytes.Buffer
	cmd := exec.Command("sh", "-c", cmdline+" "+shellQuote(t.Name)+" "+ln.Addr().String())
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("conformance: start the client %q: %w", cmdline, err)
	}
	// A program that exits without connecting (a skip, or a failure)
	// ends the wait for its connection.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
		if cmd.ProcessState.ExitCode() == SkipStatus {
			cancel()
			return
		}
		time.AfterFunc(2*time.Second, cancel)
	}()
	serveErr := ServeClient(sctx, t, ln, opts)
	select {
	case <-exited:
	case <-time.After(opts.Timeout + 20*time.Second):
		cmd.Process.Kill()
		<-exited
	}
	code := cmd.ProcessState.ExitCode()
	if code == SkipStatus {
		return fmt.Errorf("%w: %s: the client does not implement it", ErrSkipped, t.Name)
	}
	var f *Failure
	if serveErr != nil && !errors.As(serveErr, &f) {
		if code == 0 {
			return serveErr
		}
		f = &Failure{Transcript: t.Name, Target: "client", Mismatches: []*Mismatch{{Transcript: t.Name, What: serveErr.Error()}}}
	}
	if code != 0 {
		if f == nil {
			f = &Failure{Transcript: t.Name, Target: "client"}
		}
		f.Mismatches = append(f.Mismatches, &Mismatch{Transcript: t.Name,
			What: fmt.Sprintf("the client program exited with status %d:\n%s", code, strings.TrimRight(output.String(), "\n"))})
	}
	if f != nil {
		return f
	}
	return nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
