package dashboard

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	fila "github.com/fila-mq/fila/sdk/go"
)

// dlqData is a dead-letter queue's page: its depths, the dead letters a
// browse read, and the redrive form with its outcome.
type dlqData struct {
	frame
	Name, Parent string
	DLQ, Queue   *fila.QueueInfo // from ListQueues; nil when not listed
	ListErr      *brokerError
	N            int
	Browsed      bool
	Letters      []letter
	BrowseErr    *brokerError
	Refused      string // why a browse was not done
	Moved        *redriveResult
	RedriveErr   *brokerError
	Count        uint64 // the redrive form's count
}

// letter is one dead letter as a browse read it.
type letter struct {
	ID          string
	FairnessKey string
	Attempts    string // its fila-attempts header
	Error       string // its fila-error header
	Headers     []header
	EnqueuedAt  time.Time
	Payload     string
	Size        int
	Truncated   bool
	Binary      bool
}

type header struct{ Key, Value string }

// redriveResult is what a redrive moved of what was asked.
type redriveResult struct{ Moved, Asked uint64 }

// payloadShown is how many payload bytes a browse shows of each letter.
const payloadShown = 512

// browseWait bounds how long a browse waits for deliveries.
const browseWait = 3 * time.Second

// dlqData reads the depths of dlq and its queue.
func (s *Server) dlqData(ctx context.Context, dlq string) dlqData {
	d := dlqData{frame: s.frame("Dead letters of "+strings.TrimSuffix(dlq, ".dlq"), "queues"), Name: dlq,
		Parent: strings.TrimSuffix(dlq, ".dlq"), N: DefaultBrowse}
	qs, err := s.c.Admin().ListQueues(ctx)
	d.ListErr = showErr(err)
	for i, q := range qs {
		if q.Name == dlq {
			d.DLQ = &qs[i]
			if q.Parent != "" {
				d.Parent = q.Parent
			}
		}
	}
	for i, q := range qs {
		if q.Name == d.Parent {
			d.Queue = &qs[i]
		}
	}
	if d.DLQ != nil {
		d.Count = max(1, d.DLQ.Ready)
	} else {
		d.Count = 1
	}
	return d
}

func (s *Server) dlqPage(w http.ResponseWriter, r *http.Request) {
	name, ok := queueName(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	d := s.dlqData(ctx, name)
	if r.FormValue("browse") == "" {
		s.render(w, http.StatusOK, "dlq", d)
		return
	}
	n, err := strconv.Atoi(r.FormValue("n"))
	if err != nil || n < 1 || n > MaxBrowse {
		badRequest(w, "n %q: want 1 to %d messages", r.FormValue("n"), MaxBrowse)
		return
	}
	d.N = n
	switch {
	case !sameSite(r):
		// A browse leases dead letters: not on another site's behalf.
		d.Refused = "This browse was started from another site; use the form on this page."
	default:
		ready := uint64(n)
		if d.DLQ != nil {
			ready = d.DLQ.Ready
		}
		d.Browsed = true
		d.Letters, err = s.browse(ctx, name, n, ready)
		d.BrowseErr = showErr(err)
	}
	s.render(w, http.StatusOK, "dlq", d)
}

// browse reads up to n dead letters of dlq and gives them back at once.
// The protocol has no peek: it subscribes with a credit of n, reads the
// deliveries (as many as the ready count promises, or what arrives within
// browseWait), unsubscribes, and releases them, latest first, so that each
// returns to the head of its lane in the order it had. A release does
// not count an attempt, so the letters' attempts and headers stay as
// they were; for that moment they are leased to the dashboard.
func (s *Server) browse(ctx context.Context, dlq string, n int, ready uint64) ([]letter, error) {
	want := min(uint64(n), ready)
	if want == 0 {
		return nil, nil
	}
	sub, err := s.c.Consumer().Subscribe(ctx, dlq, fila.Prefetch(uint32(n)))
	if err != nil {
		return nil, err
	}
	// The releases and the unsubscribe run even if the request ends.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer rcancel()
	var got []*fila.Delivery
	wctx, wcancel := context.WithTimeout(ctx, browseWait)
	for uint64(len(got)) < want {
		d, nerr := sub.Next(wctx)
		if nerr != nil {
			if !errors.Is(nerr, context.DeadlineExceeded) || ctx.Err() != nil {
				err = nerr
			}
			break
		}
		got = append(got, d)
	}
	wcancel()
	// Unsubscribe first, so that the broker does not deliver the
	// released messages to this subscription again; Close releases
	// whatever arrived and was not read.
	if cerr := sub.Close(rctx); cerr != nil && err == nil {
		err = cerr
	}
	out := make([]letter, len(got))
	for i, d := range got {
		out[i] = letterOf(d)
	}
	for _, d := range slices.Backward(got) {
		if rerr := d.Release(rctx); rerr != nil && err == nil {
			err = rerr
		}
	}
	return out, err
}

func letterOf(d *fila.Delivery) letter {
	l := letter{ID: d.ID().String(), FairnessKey: d.FairnessKey(), EnqueuedAt: d.EnqueuedAt(),
		Attempts: d.Header("fila-attempts"), Error: d.Header("fila-error")}
	for k, v := range d.Headers() {
		if k != "fila-attempts" && k != "fila-error" {
			l.Headers = append(l.Headers, header{k, v})
		}
	}
	slices.SortFunc(l.Headers, func(a, b header) int { return strings.Compare(a.Key, b.Key) })
	p := d.Payload()
	l.Size = len(p)
	if len(p) > payloadShown {
		p, l.Truncated = p[:payloadShown], true
	}
	if !utf8.Valid(p) && !(l.Truncated && utf8.Valid(trimPartialRune(p))) {
		l.Binary = true
		return l
	}
	l.Payload = string(trimPartialRune(p))
	return l
}

// trimPartialRune drops an incomplete UTF-8 sequence cut at the end of p.
func trimPartialRune(p []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(p) > 0; i++ {
		if r, size := utf8.DecodeLastRune(p); r != utf8.RuneError || size != 1 {
			return p
		}
		p = p[:len(p)-1]
	}
	return p
}

// redrive moves dead letters back to their queue. It needs the form's
// token and a count, and moves nothing until the form also says
// confirm=yes: without it, it answers with a page asking to confirm.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		badRequest(w, "%v", err)
		return
	}
	if !s.checkToken(r) {
		http.Error(w, "dashboard: the form's token is missing or stale: reload the page and submit again", http.StatusForbidden)
		return
	}
	name := r.PostFormValue("name")
	if !validName(name) {
		badRequest(w, "name %q: want a dead-letter queue name", name)
		return
	}
	count, err := strconv.ParseUint(strings.TrimSpace(r.PostFormValue("count")), 10, 64)
	if err != nil || count == 0 {
		badRequest(w, "count %q: want how many messages to move, 1 or more", r.PostFormValue("count"))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	if r.PostFormValue("confirm") != "yes" {
		d := s.dlqData(ctx, name)
		d.Title = "Confirm redrive"
		d.Count = count
		s.render(w, http.StatusOK, "confirm", d)
		return
	}
	moved, err := s.c.Admin().Redrive(ctx, name, count)
	d := s.dlqData(ctx, name)
	d.Moved = &redriveResult{Moved: moved, Asked: count}
	d.RedriveErr = showErr(err)
	s.render(w, http.StatusOK, "dlq", d)
}
