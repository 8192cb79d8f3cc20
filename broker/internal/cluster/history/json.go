package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonEvent is the JSON form of an Event: one object a line,
//
//	{"seq":4,"op":"delivered","process":"c1","token":"t1","id":"0190a3c4-…","attempt":1}
//
// with empty and zero fields left out.
type jsonEvent struct {
	Seq      uint64 `json:"seq"`
	Op       string `json:"op"`
	Process  string `json:"process,omitempty"`
	Token    string `json:"token,omitempty"`
	ID       string `json:"id,omitempty"`
	Attempt  uint32 `json:"attempt,omitempty"`
	Definite bool   `json:"definite,omitempty"`
}

// WriteJSON writes h to w as JSON Lines: one object per event, in the
// order of h.Events, with the op by name and the ID as a UUID. ReadJSON
// reads it back. WriteJSON returns the first error of w.
func (h History) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range h.Events {
		j := jsonEvent{Seq: e.Seq, Op: e.Op.String(), Process: e.Process, Token: e.Token,
			Attempt: e.Attempt, Definite: e.Definite}
		if e.ID != ([16]byte{}) {
			j.ID = FormatID(e.ID)
		}
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadJSON reads a History written by WriteJSON. It fails on malformed
// JSON, an unknown op or a malformed ID, naming the event's position.
func ReadJSON(r io.Reader) (History, error) {
	var h History
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	for n := 1; ; n++ {
		var j jsonEvent
		err := dec.Decode(&j)
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		if err != nil {
			return History{}, fmt.Errorf("history: event %d: %w", n, err)
		}
		op, ok := parseOp(j.Op)
		if !ok {
			return History{}, fmt.Errorf("history: event %d: unknown op %q", n, j.Op)
		}
		e := Event{Seq: j.Seq, Op: op, Process: j.Process, Token: j.Token, Attempt: j.Attempt, Definite: j.Definite}
		if j.ID != "" {
			if e.ID, err = ParseID(j.ID); err != nil {
				return History{}, fmt.Errorf("history: event %d: id %q: want a UUID", n, j.ID)
			}
		}
		h.Events = append(h.Events, e)
	}
}
