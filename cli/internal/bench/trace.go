package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// A trace is a job-submission trace: one message per job, in submission
// order. It reads the job_events layout of the Google cluster-usage trace
// clusterdata-2011-2 (J. Wilkes, C. Reiss; Google; CC-BY 4.0), a CSV file
// whose header names at least the columns timestamp (µs), user and
// logical_job_name; job_id and scheduling_class are kept when present.
type trace struct {
	jobs []job
	// users are the distinct user names; job.user indexes them.
	users []string
	// span is the offset of the last job.
	span time.Duration
}

// A job is one submission.
type job struct {
	// at is the submission time as an offset from the trace's first
	// submission.
	at time.Duration
	// user indexes trace.users.
	user int32
	// logical is the job's logical_job_name: the program it runs.
	logical string
	// row is the job's row number in the file, from 1 after the header.
	row int
}

// maxTraceOffset bounds the span of a trace: a year of microseconds keeps
// every offset far inside time.Duration.
const maxTraceOffset = 366 * 24 * time.Hour

// readTrace parses a trace from r, at most limit jobs (0: all). Rows must
// be in non-decreasing timestamp order, as the trace's are. It returns an
// error naming the line for a missing column, a malformed or decreasing
// timestamp, an empty user or a span beyond a year.
func readTrace(r io.Reader, limit int) (*trace, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("trace: empty file")
	}
	if err != nil {
		return nil, fmt.Errorf("trace: header: %w", err)
	}
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	need := []string{"timestamp", "user", "logical_job_name"}
	for _, name := range need {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("trace: header: no column %q", name)
		}
	}
	iTS, iUser, iLogical := col["timestamp"], col["user"], col["logical_job_name"]
	width := max(iTS, iUser, iLogical) + 1

	t := &trace{}
	userIndex := map[string]int32{}
	logicals := map[string]string{} // interned: programs repeat
	var first, prev int64
	for line := 2; limit == 0 || len(t.jobs) < limit; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if len(rec) < width {
			return nil, fmt.Errorf("trace: line %d: %d fields; want at least %d", line, len(rec), width)
		}
		ts, err := strconv.ParseInt(rec[iTS], 10, 64)
		if err != nil || ts < 0 {
			return nil, fmt.Errorf("trace: line %d: timestamp %q: want microseconds, a non-negative integer", line, rec[iTS])
		}
		if len(t.jobs) == 0 {
			first, prev = ts, ts
		}
		if ts < prev {
			return nil, fmt.Errorf("trace: line %d: timestamp %d before the previous row's %d", line, ts, prev)
		}
		if ts-first > int64(maxTraceOffset/time.Microsecond) {
			return nil, fmt.Errorf("trace: line %d: timestamp %d more than a year after the first", line, ts)
		}
		prev = ts
		name := rec[iUser]
		if name == "" {
			return nil, fmt.Errorf("trace: line %d: empty user", line)
		}
		u, ok := userIndex[name]
		if !ok {
			u = int32(len(t.users))
			name = string([]byte(name)) // rec is reused
			userIndex[name] = u
			t.users = append(t.users, name)
		}
		lg, ok := logicals[rec[iLogical]]
		if !ok {
			lg = string([]byte(rec[iLogical]))
			logicals[lg] = lg
		}
		t.jobs = append(t.jobs, job{at: time.Duration(ts-first) * time.Microsecond, user: u, logical: lg, row: line - 1})
	}
	if len(t.jobs) == 0 {
		return nil, errors.New("trace: no rows")
	}
	t.span = t.jobs[len(t.jobs)-1].at
	return t, nil
}

// provider maps a logical job name to one of n throttle keys: the
// FNV-1a 32-bit hash of the name (G. Fowler, L. C. Noll, K.-P. Vo; see
// draft-eastlake-fnv) mod n. A program always goes to the same provider.
func provider(logical string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(logical); i++ {
		h ^= uint32(logical[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// heaviest returns the index of the user with the most jobs (the first
// such in the trace on a tie).
func (t *trace) heaviest() int32 {
	counts := make([]int, len(t.users))
	for _, j := range t.jobs {
		counts[j.user]++
	}
	return int32(slices.Index(counts, slices.Max(counts)))
}

// window returns the first and last submission times of user u, and
// false if u submitted nothing.
func (t *trace) window(u int32) (from, to time.Duration, ok bool) {
	for _, j := range t.jobs {
		if j.user == u {
			if !ok {
				from, ok = j.at, true
			}
			to = j.at
		}
	}
	return from, to, ok
}
