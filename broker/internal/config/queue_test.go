package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// TestQueueSettingsAgree runs each case through the loader, as the [queue]
// section of fila.toml, and through CreateQueue, as a queue's own
// settings on a broker with the default configuration: both must accept
// the same values and refuse the same ones with the same words.
func TestQueueSettingsAgree(t *testing.T) {
	type setting struct {
		key string        // the [queue] key
		v   time.Duration // a duration's value; max_attempts uses n
		n   int64
	}
	tests := []struct {
		name     string
		maxLease time.Duration // [queue] max_lease_extension; 0 for the default
		set      []setting
		// bad is the setting refused ("" if none) and want the accepted
		// form both report.
		bad, want string
	}{
		{"defaults", 0, nil, "", ""},
		{"visibility at the lease maximum", 0, []setting{{key: "visibility_timeout", v: 12 * time.Hour}}, "", ""},
		{"visibility above the lease maximum", 0, []setting{{key: "visibility_timeout", v: 12*time.Hour + time.Millisecond}},
			"visibility_timeout", "a duration from 1ms to max_lease_extension (12h)"},
		{"visibility of 292 years", 0, []setting{{key: "visibility_timeout", v: 2562047 * time.Hour}},
			"visibility_timeout", "a duration from 1ms to max_lease_extension (12h)"},
		{"visibility above a lowered lease maximum", time.Hour, []setting{{key: "visibility_timeout", v: 2 * time.Hour}},
			"visibility_timeout", "a duration from 1ms to max_lease_extension (1h)"},
		{"visibility under a millisecond", 0, []setting{{key: "visibility_timeout", v: time.Microsecond}},
			"visibility_timeout", "a duration from 1ms to max_lease_extension (12h)"},
		{"max attempts at the limit", 0, []setting{{key: "max_attempts", n: 1000000}}, "", ""},
		{"max attempts above the limit", 0, []setting{{key: "max_attempts", n: 1000001}},
			"max_attempts", "an integer from 1 to 1000000"},
		{"backoff at the limit", 0, []setting{{key: "backoff_base", v: 24 * time.Hour}, {key: "backoff_max", v: 24 * time.Hour}}, "", ""},
		{"backoff base above max", 0, []setting{{key: "backoff_base", v: 10 * time.Second}, {key: "backoff_max", v: 5 * time.Second}},
			"backoff_max", "a duration from backoff_base (10s) to 24h"},
		{"backoff base above the default max", 0, []setting{{key: "backoff_base", v: 2 * time.Minute}},
			"backoff_max", "a duration from backoff_base (2m) to 24h"},
		{"backoff base above the limit", 0, []setting{{key: "backoff_base", v: 25 * time.Hour}, {key: "backoff_max", v: 25 * time.Hour}},
			"backoff_base", "a duration from 1ms to 24h"},
		{"backoff max above the limit", 0, []setting{{key: "backoff_max", v: 25 * time.Hour}},
			"backoff_max", "a duration from backoff_base (1s) to 24h"},
		{"dedup window at the limit", 0, []setting{{key: "dedup_window", v: 168 * time.Hour}}, "", ""},
		{"dedup window above the limit", 0, []setting{{key: "dedup_window", v: 169 * time.Hour}},
			"dedup_window", "a duration from 1ms to 168h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := "[queue]\n"
			spec := sched.QueueSpec{Name: "q"}
			for _, s := range tt.set {
				switch s.key {
				case "visibility_timeout":
					spec.VisibilityTimeout = s.v
				case "max_attempts":
					spec.MaxAttempts = uint32(s.n)
					file += fmt.Sprintf("%s = %d\n", s.key, s.n)
					continue
				case "backoff_base":
					spec.BackoffBase = s.v
				case "backoff_max":
					spec.BackoffMax = s.v
				case "dedup_window":
					spec.DedupWindow = s.v
				}
				file += fmt.Sprintf("%s = %q\n", s.key, s.v.String())
			}
			if tt.maxLease != 0 {
				file += fmt.Sprintf("max_lease_extension = %q\n", tt.maxLease.String())
			}

			_, _, loadErr := Load(setup(t, file, nil))
			broker := Default().Queue // the broker CreateQueue runs on
			if tt.maxLease != 0 {
				broker.MaxLeaseExtension = tt.maxLease
			}
			createErr := createQueue(broker, spec)

			if tt.bad == "" {
				if loadErr != nil {
					t.Errorf("Load(%q) error = %v; want nil", file, loadErr)
				}
				if createErr != nil {
					t.Errorf("CreateQueue(%+v) error = %v; want nil", spec, createErr)
				}
				return
			}
			wantLoad := "config: queue." + tt.bad + " = "
			if loadErr == nil || !strings.Contains(loadErr.Error(), wantLoad) || !strings.Contains(loadErr.Error(), "): want "+tt.want) {
				t.Errorf("Load(%q) error = %v; want one naming %q and wanting %q", file, loadErr, "queue."+tt.bad, tt.want)
			}
			var se *sched.SettingError
			if !errors.Is(createErr, fault.ErrInvalidArgument) || !errors.As(createErr, &se) || se.Setting != tt.bad || se.Want != tt.want {
				t.Fatalf("CreateQueue(%+v) error = %v; want INVALID_ARGUMENT naming %s and wanting %q", spec, createErr, tt.bad, tt.want)
			}
			if !strings.HasPrefix(createErr.Error(), "create queue q: "+tt.bad+" ") {
				t.Errorf("CreateQueue error = %q; want it to start %q", createErr, "create queue q: "+tt.bad+" ")
			}
		})
	}
}

// createQueue runs CreateQueue on a scheduler configured with q, as the
// broker configures it, and returns its error.
func createQueue(q QueueConfig, spec sched.QueueSpec) error {
	s := sched.New(sched.Config{
		VisibilityTimeout: q.VisibilityTimeout,
		MaxAttempts:       q.MaxAttempts,
		BackoffBase:       q.BackoffBase,
		BackoffMax:        q.BackoffMax,
		DedupWindow:       q.DedupWindow,
		MaxLeaseExtension: q.MaxLeaseExtension,
	})
	s.CreateQueue(1, spec)
	rd := s.Ready()
	defer s.Advance(rd)
	err, _ := rd.Replies[0].Value.(error)
	return err
}
