package conformance

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// execCore is a client core in another language behind a driver program,
// spoken to in JSON lines (docs/conformance.md, "The driver protocol"):
// each command the runner writes to the driver's stdin is answered by one
// line on its stdout, with the bytes the core wrote since the last reply
// and the events it reported.
type execCore struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	err   error        // the first failure of the driver itself
	ready []core.Ready // replies not yet drained
	state core.State   // the state the driver's state events built
}

// execTimeout bounds the wait for one reply.
const execTimeout = 10 * time.Second

// startExecCore starts the driver command line and creates its core from
// the transcript's Handshake.
func startExecCore(cmdline string, hs *wire.Handshake) (*execCore, error) {
	cmd := exec.Command("sh", "-c", cmdline)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the core driver %q: %w", cmdline, err)
	}
	x := &execCore{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	x.state.ServerMaxFrame = wire.DefaultMaxFrameSize
	if err := x.call(map[string]any{"cmd": "start", "handshake": FrameJSON(hs)}); err != nil {
		x.stop()
		return nil, fmt.Errorf("the core driver: start: %w", err)
	}
	return x, nil
}

// execReply is one reply line.
type execReply struct {
	Out    string      `json:"out"`
	Events []execEvent `json:"events"`
	Error  string      `json:"error"`
}

// execEvent is one event of a reply.
type execEvent struct {
	Kind         string      `json:"kind"`
	Req          uint32      `json:"req"`
	Op           string      `json:"op"`
	Response     string      `json:"response"`
	Error        *execError  `json:"error"`
	Subscription uint32      `json:"subscription"`
	Messages     []execLease `json:"messages"`
	Leases       []execLease `json:"leases"`
	LeaderHint   string      `json:"leader_hint"`

	// state events
	State        string   `json:"state"`
	Version      uint16   `json:"version"`
	NodeID       string   `json:"node_id"`
	ServerName   string   `json:"server_name"`
	MaxFrameSize int      `json:"max_frame_size"`
	Capabilities []string `json:"capabilities"`
	Code         string   `json:"code"`
	Message      string   `json:"message"`
}

// execError is an error of an event: a broker's Error (code, message,
// leader_hint), a connection error (code, reason), or any other failure
// (text).
type execError struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	LeaderHint string `json:"leader_hint"`
	Reason     string `json:"reason"`
	Text       string `json:"text"`
}

type execLease struct {
	ID    string `json:"id"`
	Lease string `json:"lease"`
}

// call sends one command and queues its reply as a Ready. An error is the
// driver's failure or the command's.
func (x *execCore) call(cmd map[string]any) error {
	if x.err != nil {
		return x.err
	}
	line, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	if _, err := x.in.Write(append(line, '\n')); err != nil {
		x.err = fmt.Errorf("the core driver: write %s: %w", cmd["cmd"], err)
		return x.err
	}
	type result struct {
		line []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := x.out.ReadBytes('\n')
		ch <- result{l, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-time.After(execTimeout):
		x.err = fmt.Errorf("the core driver did not answer %s within %v", cmd["cmd"], execTimeout)
		x.stop()
		return x.err
	}
	if res.err != nil {
		x.err = fmt.Errorf("the core driver: read the reply to %s: %w", cmd["cmd"], res.err)
		return x.err
	}
	var rep execReply
	if err := json.Unmarshal(res.line, &rep); err != nil {
		x.err = fmt.Errorf("the core driver: reply to %s: %w: %q", cmd["cmd"], err, res.line)
		return x.err
	}
	rd, err := x.readyOf(&rep)
	if err != nil {
		x.err = fmt.Errorf("the core driver: reply to %s: %w", cmd["cmd"], err)
		return x.err
	}
	x.ready = append(x.ready, rd...)
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}

// readyOf turns a reply into Readys: its bytes, then one Ready per event,
// in the order the driver listed them.
func (x *execCore) readyOf(rep *execReply) ([]core.Ready, error) {
	out, err := hex.DecodeString(rep.Out)
	if err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	rds := []core.Ready{{Out: out}}
	for _, ev := range rep.Events {
		var rd core.Ready
		switch ev.Kind {
		case "completion":
			op, ok := opcodeNamed(ev.Op)
			if !ok {
				return nil, fmt.Errorf("completion of unknown op %q", ev.Op)
			}
			cp := core.Completion{RequestID: ev.Req, Op: op}
			if ev.Error != nil {
				if cp.Err, err = ev.Error.err(); err != nil {
					return nil, err
				}
			} else {
				rop, ok := opcodeNamed(ev.Response)
				if !ok {
					return nil, fmt.Errorf("completion with unknown response %q", ev.Response)
				}
				cp.Response = wire.New(rop)
			}
			rd.Completions = []core.Completion{cp}
		case "delivery":
			msgs := make([]wire.DeliveredMessage, len(ev.Messages))
			for i, m := range ev.Messages {
				if msgs[i].ID, msgs[i].Lease, err = m.parse(); err != nil {
					return nil, err
				}
			}
			rd.Deliveries = []core.DeliveryBatch{{Subscription: ev.Subscription, Messages: msgs}}
		case "expired":
			ls := make([]wire.ExpiredLease, len(ev.Leases))
			for i, m := range ev.Leases {
				if ls[i].ID, ls[i].Lease, err = m.parse(); err != nil {
					return nil, err
				}
			}
			rd.Expired = []core.Expiry{{Subscription: ev.Subscription, Leases: ls}}
		case "ended":
			end := core.SubscriptionEnd{Subscription: ev.Subscription}
			if ev.Error != nil {
				if end.Err, err = ev.Error.err(); err != nil {
					return nil, err
				}
			}
			rd.Ended = []core.SubscriptionEnd{end}
		case "redirect":
			op, ok := opcodeNamed(ev.Op)
			if !ok {
				return nil, fmt.Errorf("redirect of unknown op %q", ev.Op)
			}
			rd.Redirects = []core.Redirect{{RequestID: ev.Req, Op: op, LeaderHint: ev.LeaderHint}}
		case "state":
			st := x.state
			switch ev.State {
			case "handshaken":
				st.Handshaken = true
				st.Version, st.NodeID, st.ServerName = ev.Version, ev.NodeID, ev.ServerName
				st.ServerMaxFrame, st.Capabilities = ev.MaxFrameSize, ev.Capabilities
			case "going-away":
				st.GoingAway = true
				if ev.Code != "" {
					if st.GoAwayCode, err = parseCode(ev.Code); err != nil {
						return nil, err
					}
				}
				st.GoAwayMessage, st.LeaderHint = ev.Message, ev.LeaderHint
			case "failed":
				st.Failed = true
				st.Err = errors.New("failed")
				if ev.Error != nil {
					if st.Err, err = ev.Error.err(); err != nil {
						return nil, err
					}
				}
			default:
				return nil, fmt.Errorf("unknown state %q", ev.State)
			}
			x.state = st
			rd.State = &st
		default:
			return nil, fmt.Errorf("unknown event kind %q", ev.Kind)
		}
		rds = append(rds, rd)
	}
	return rds, nil
}

func (e *execError) err() (error, error) {
	switch {
	case e.Text != "":
		return errors.New(e.Text), nil
	case e.Reason != "":
		c, err := parseCode(e.Code)
		if err != nil {
			return nil, err
		}
		return &wire.ConnError{Code: c, Reason: e.Reason}, nil
	case e.Code != "":
		c, err := parseCode(e.Code)
		if err != nil {
			return nil, err
		}
		return &core.RequestError{Code: c, Message: e.Message, LeaderHint: e.LeaderHint}, nil
	}
	return nil, errors.New("an error with neither code nor text")
}

func (m execLease) parse() ([16]byte, uint64, error) {
	id, err := parseUUID(m.ID)
	if err != nil {
		return id, 0, err
	}
	l, err := strconv.ParseUint(m.Lease, 10, 64)
	return id, l, err
}

func (x *execCore) receive(b []byte) {
	x.call(map[string]any{"cmd": "receive", "hex": hex.EncodeToString(b)}) // a failure shows in the state events
}

func (x *execCore) tick(now core.Time) {
	x.call(map[string]any{"cmd": "tick", "ms": int64(now) / int64(time.Millisecond)})
}

func (x *execCore) send(f wire.Frame) error {
	return x.call(map[string]any{"cmd": "send", "frame": f.Opcode().String(), "fields": FrameJSON(f)})
}

func (x *execCore) subscribe(f *wire.Subscribe) error {
	cmd := FrameJSON(f)
	cmd["cmd"] = "subscribe"
	return x.call(cmd)
}

func (x *execCore) unsubscribe(sub uint32) error {
	return x.call(map[string]any{"cmd": "unsubscribe", "subscription": sub})
}

func (x *execCore) settle(sub uint32, leases []uint64) {
	ls := make([]string, len(leases))
	for i, l := range leases {
		ls[i] = strconv.FormatUint(l, 10)
	}
	x.call(map[string]any{"cmd": "settle", "subscription": sub, "leases": ls})
}

func (x *execCore) close() { x.call(map[string]any{"cmd": "close"}) }

func (x *execCore) drain(each func(core.Ready)) {
	rds := x.ready
	x.ready = nil
	for _, rd := range rds {
		each(rd)
	}
}

// stop closes the driver's stdin, which ends it, and waits; a driver that
// does not exit is killed.
func (x *execCore) stop() {
	if x.cmd.Process == nil || x.cmd.ProcessState != nil {
		return
	}
	x.in.Close()
	done := make(chan struct{})
	go func() {
		x.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		x.cmd.Process.Kill()
		<-done
	}
}
