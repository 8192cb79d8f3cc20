package history

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJSONRoundTrip(t *testing.T) {
	var r Recorder
	r.EnqueueInvoked("p1", "t1")
	r.EnqueueOK("p1", "t1", id(1))
	r.EnqueueInvoked("p2", "t \"quoted\"\n")
	r.EnqueueFailed("p2", "t \"quoted\"\n", true)
	r.EnqueueFailed("p2", "t2", false)
	r.Delivered("c1", "t1", id(1), 2)
	r.AckInvoked("c1", id(1))
	r.AckOK("c1", id(1))
	r.AckFailed("c1", [16]byte{})
	histories := []History{{}, r.History(), newModel(7).run(200)}
	for i, h := range histories {
		var buf bytes.Buffer
		if err := h.WriteJSON(&buf); err != nil {
			t.Fatalf("history %d: WriteJSON() error = %v", i, err)
		}
		back, err := ReadJSON(&buf)
		if err != nil {
			t.Fatalf("history %d: ReadJSON() error = %v", i, err)
		}
		if !reflect.DeepEqual(back, h) {
			t.Errorf("history %d: ReadJSON(WriteJSON(h)) = %v; want %v", i, back, h)
		}
	}
}

func TestJSONForm(t *testing.T) {
	var r Recorder
	r.EnqueueInvoked("p1", "t1")
	r.Delivered("c1", "t1", id(1), 1)
	r.EnqueueFailed("p1", "t1", false)
	var buf bytes.Buffer
	if err := r.History().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	want := `{"seq":1,"op":"enqueue-invoked","process":"p1","token":"t1"}
{"seq":2,"op":"delivered","process":"c1","token":"t1","id":"01900000-0000-0000-0000-000000000001","attempt":1}
{"seq":3,"op":"enqueue-failed","process":"p1","token":"t1"}
`
	if buf.String() != want {
		t.Errorf("WriteJSON() =\n%s\nwant\n%s", buf.String(), want)
	}
	if err := r.History().WriteJSON(failWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteJSON(failing writer) error = %v; want the writer's", err)
	}
}

func TestReadJSONErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"seq":1,"op":"enqueue-invoked"}` + "\n" + `{"seq":2,"op":"teleported"}`, `history: event 2: unknown op "teleported"`},
		{`{"seq":1,"op":"ack-ok","id":"xyz"}`, `history: event 1: id "xyz": want a UUID`},
		{`{"seq":1,"op":"ack-ok","colour":"red"}`, `history: event 1: json: unknown field "colour"`},
		{`{"seq":1,"op":`, `history: event 1: unexpected EOF`},
		{`[1,2]`, `history: event 1: json: cannot unmarshal array`},
	} {
		if _, err := ReadJSON(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadJSON(%q) error = %v; want %q", tt.in, err, tt.want)
		}
	}
}
