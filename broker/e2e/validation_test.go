package e2e

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

const year = 365 * 24 * time.Hour

// wantInvalid checks that err is a *fila.StatusError with INVALID_ARGUMENT
// whose message names what.
func wantInvalid(t *testing.T, call string, err error, what string) {
	t.Helper()
	var se *fila.StatusError
	if !errors.As(err, &se) || se.Code != wire.CodeInvalidArgument || !errors.Is(err, fila.ErrInvalidArgument) {
		t.Fatalf("%s error = %v (%T); want *fila.StatusError INVALID_ARGUMENT", call, err, err)
	}
	if !strings.Contains(se.Message, what) {
		t.Errorf("%s error = %q; want it to name %q", call, se.Message, what)
	}
}

// TestCreateQueueRefusesOutOfRange creates queues with each setting out of
// the range the [queue] section of fila.toml accepts: each is refused
// with INVALID_ARGUMENT naming the setting, and no queue is created.
func TestCreateQueueRefusesOutOfRange(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	for _, tt := range []struct {
		name    string
		spec    *fila.QueueSpec
		setting string
	}{
		{"visibility 292 years", fila.NewQueueSpec("v1").VisibilityTimeout(math.MaxInt64), "visibility_timeout"},
		{"visibility 100 years", fila.NewQueueSpec("v2").VisibilityTimeout(100 * year), "visibility_timeout"},
		{"visibility above 12h", fila.NewQueueSpec("v3").VisibilityTimeout(12*time.Hour + time.Millisecond), "visibility_timeout"},
		{"max attempts above 1000000", fila.NewQueueSpec("a1").MaxAttempts(1_000_001), "max_attempts"},
		{"max attempts at most u32", fila.NewQueueSpec("a2").MaxAttempts(math.MaxUint32), "max_attempts"},
		{"backoff base above max", fila.NewQueueSpec("b1").Backoff(10*time.Second, 5*time.Second), "backoff_max 5s: want a duration from backoff_base (10s) to 24h"},
		{"backoff base above the broker's max", fila.NewQueueSpec("b2").Backoff(2*time.Minute, 0), "backoff_max 1m (the broker's default)"},
		{"backoff above 24h", fila.NewQueueSpec("b3").Backoff(25*time.Hour, 25*time.Hour), "backoff_base"},
		{"dedup window above 7 days", fila.NewQueueSpec("d1").DedupWindow(8 * 24 * time.Hour), "dedup_window"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Admin().CreateQueue(ctx, tt.spec)
			wantInvalid(t, "CreateQueue("+tt.spec.Name()+")", err, tt.setting)
		})
	}

	// Values the protocol can carry but the SDK cannot send.
	rc := dialRaw(t, srv.Addr, true)
	for i, f := range []*wire.CreateQueue{
		{Name: "raw1", VisibilityTimeoutMS: math.MaxUint64},
		{Name: "raw2", DedupWindowMS: math.MaxUint64},
		{Name: "raw3", BackoffBaseMS: math.MaxUint64, BackoffMaxMS: math.MaxUint64},
	} {
		rc.send(uint32(10+i), f)
		if h, fr := rc.recv(); h.Opcode != wire.OpError || fr.(*wire.ErrorFrame).Code != wire.CodeInvalidArgument {
			t.Errorf("CreateQueue %+v answered by %v %+v; want Error INVALID_ARGUMENT", f, h.Opcode, fr)
		}
	}

	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 0 {
		t.Errorf("ListQueues() = %+v; want none created", qs)
	}

	// The bounds themselves are accepted, and a positive duration under a
	// millisecond is sent as 1ms, not as 0 (the broker's default, 30s).
	for _, spec := range []*fila.QueueSpec{
		fila.NewQueueSpec("edge").VisibilityTimeout(12*time.Hour).MaxAttempts(1_000_000).
			Backoff(24*time.Hour, 24*time.Hour).DedupWindow(7 * 24 * time.Hour),
		fila.NewQueueSpec("tiny").VisibilityTimeout(500 * time.Microsecond),
	} {
		if err := c.Admin().CreateQueue(ctx, spec); err != nil {
			t.Fatalf("CreateQueue(%s) = %v", spec.Name(), err)
		}
	}
	for name, want := range map[string]time.Duration{"edge": 12 * time.Hour, "tiny": time.Millisecond} {
		st, err := c.Admin().QueueStats(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.VisibilityTimeout != want {
			t.Errorf("QueueStats(%s).VisibilityTimeout = %v; want %v", name, st.VisibilityTimeout, want)
		}
	}
}

// TestExtendLeaseMaximum extends a lease by more than max_lease_extension
// (12h by default): refused with INVALID_ARGUMENT, the deadline unchanged;
// 12h itself is accepted. In a batch, only the items over it fail.
func TestExtendLeaseMaximum(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("long")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Enqueue(ctx, "long", []byte("job")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "long", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, ctx, sub)
	before := d.LeaseDeadline()
	for _, dur := range []time.Duration{100 * year, math.MaxInt64, 12*time.Hour + time.Millisecond} {
		_, err := d.ExtendLease(ctx, dur)
		wantInvalid(t, "ExtendLease("+dur.String()+")", err, "max_lease_extension (12h)")
		if got := d.LeaseDeadline(); !got.Equal(before) {
			t.Errorf("LeaseDeadline() after a refused ExtendLease(%v) = %v; want %v", dur, got, before)
		}
	}
	deadline, err := d.ExtendLease(ctx, 12*time.Hour)
	if err != nil {
		t.Fatalf("ExtendLease(12h) = %v", err)
	}
	if !deadline.After(before.Add(11 * time.Hour)) {
		t.Errorf("ExtendLease(12h) = %v; want about 12h after %v", deadline, before)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// math.MaxInt64 ms, which no time.Duration holds, on the wire, in a
	// batch with a valid item: each item is answered on its own.
	if _, err := c.Producer().Enqueue(ctx, "long", []byte("job 2")); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, srv.Addr, true)
	rc.send(2, &wire.Subscribe{Queue: "long", Prefetch: 1})
	var m wire.DeliveredMessage
	for m.Lease == 0 {
		switch h, f := rc.recv(); f := f.(type) {
		case *wire.SubscribeOk:
		case *wire.Delivery:
			m = f.Messages[0]
		default:
			t.Fatalf("Subscribe answered by %v %+v", h.Opcode, f)
		}
	}
	item := func(ms uint64) wire.ExtendLeaseItem {
		return wire.ExtendLeaseItem{Queue: "long", ID: m.ID, Lease: m.Lease, DurationMS: ms}
	}
	rc.send(3, &wire.ExtendLease{Items: []wire.ExtendLeaseItem{item(math.MaxInt64), item(math.MaxUint64), item(uint64(12 * time.Hour / time.Millisecond))}})
	h, f := rc.recv()
	res, ok := f.(*wire.ExtendLeaseResult)
	if !ok || len(res.Results) != 3 {
		t.Fatalf("ExtendLease answered by %v %+v; want ExtendLeaseResult with 3 results", h.Opcode, f)
	}
	for i, want := range []wire.Code{wire.CodeInvalidArgument, wire.CodeInvalidArgument, wire.CodeOK} {
		if r := res.Results[i]; r.Code != want {
			t.Errorf("ExtendLease item %d: %v %q; want %v", i, r.Code, r.Message, want)
		}
	}
	if r := res.Results[2]; r.LeaseDeadlineAtMS <= m.LeaseDeadlineAtMS {
		t.Errorf("ExtendLease(12h) deadline %d; want after %d", r.LeaseDeadlineAtMS, m.LeaseDeadlineAtMS)
	}
}

// TestMaxLeaseExtensionConfigured lowers [queue] max_lease_extension to
// 1h: ExtendLease and CreateQueue's visibility timeout follow it.
func TestMaxLeaseExtensionConfigured(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_QUEUE_MAX_LEASE_EXTENSION=1h"))
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("q").VisibilityTimeout(2*time.Hour))
	wantInvalid(t, "CreateQueue(visibility 2h)", err, "visibility_timeout 2h: want a duration from 1ms to max_lease_extension (1h)")
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("q").VisibilityTimeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Enqueue(ctx, "q", []byte("job")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "q", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, ctx, sub)
	_, err = d.ExtendLease(ctx, time.Hour+time.Millisecond)
	wantInvalid(t, "ExtendLease(1h0m0.001s)", err, "max_lease_extension (1h)")
	if _, err := d.ExtendLease(ctx, time.Hour); err != nil {
		t.Fatalf("ExtendLease(1h) = %v", err)
	}
}

// TestThrottleValueForms sets throttle values ParseFloat would take but
// the documented "rate,burst" decimal form does not.
func TestThrottleValueForms(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	for _, v := range []string{"0x1p-2,5", "1_000,5", "1e3,5", "+1,5", ".5,1", "inf,1"} {
		err := c.Admin().SetConfig(ctx, "throttle.k", v)
		var se *fila.SetConfigError
		if !errors.As(err, &se) || se.Code != fila.SetConfigInvalidConfigValue {
			t.Errorf("SetConfig(throttle.k, %q) = %v; want INVALID_CONFIG_VALUE", v, err)
		}
	}
	if err := c.Admin().SetConfig(ctx, "throttle.k", " 2.5 , 10 "); err != nil {
		t.Errorf("SetConfig(throttle.k, \" 2.5 , 10 \") = %v", err)
	}
}
