package bench

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The layouts of a trace file (replay's --trace-format).
const (
	// layoutAuto tells the layouts apart by the header: one that starts
	// with time_s is the generic layout, any other Google's.
	layoutAuto = "auto"
	// layoutGoogle is the job_events layout of Google's cluster-usage
	// trace clusterdata-2011-2 (J. Wilkes, C. Reiss; Google; CC-BY 4.0):
	// a CSV file whose header names at least the columns timestamp (µs),
	// user and logical_job_name, in any order among others.
	layoutGoogle = "google"
	// layoutCSV is the generic layout: a CSV file whose header is
	// exactly genericHeader, optionally followed by the cost column.
	layoutCSV = "csv"
)

// genericHeader are the columns of the generic layout, in order; a fifth,
// genericCost, is optional.
var genericHeader = []string{"time_s", "tenant", "fairness_key", "throttle_key"}

const genericCost = "cost"

// A trace is a job-submission trace: one message per job, in submission
// order.
type trace struct {
	// layout is layoutGoogle or layoutCSV.
	layout string
	jobs   []job
	// users are the distinct users (the generic layout's tenants);
	// job.user indexes them.
	users []string
	// keys are the distinct fairness keys the generic layout names
	// (see job.key).
	keys []string
	// throttles are the distinct throttle keys (see job.throttle). The
	// Google layout's are its providers, set by assignProviders.
	throttles []string
	// span is the offset of the last job.
	span time.Duration
	// costs says whether any job carries a cost of its own.
	costs bool
}

// A job is one submission.
type job struct {
	// at is the submission time as an offset from the trace's first
	// submission.
	at time.Duration
	// user indexes trace.users.
	user int32
	// key is 1 + the index of the job's fairness key in trace.keys; 0
	// means the user's name is its fairness key.
	key int32
	// throttle is 1 + the index of the job's throttle key in
	// trace.throttles; 0 means none.
	throttle int32
	// cost is the consumer time the job takes, in trace time; 0 means
	// the fixed time the replay's capacity implies.
	cost time.Duration
	// logical is the Google layout's logical_job_name: the program the
	// job runs; "" in the generic layout.
	logical string
	// row is the job's row number in the file, from 1 after the header.
	row int
}

// maxTraceOffset bounds the span of a trace and a job's cost: a year of
// microseconds keeps every offset far inside time.Duration.
const maxTraceOffset = 366 * 24 * time.Hour

// readTrace parses a trace from r in layout (layoutAuto, layoutGoogle or
// layoutCSV), at most limit jobs (0: all). Rows must be in non-decreasing
// time order. It returns an error naming the line for a header of
// neither layout, a row of the wrong width, a malformed, non-finite or
// decreasing time, an empty user or tenant, a malformed or non-positive
// cost, or a span beyond a year.
func readTrace(r io.Reader, limit int, layout string) (*trace, error) {
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
	header = slices.Clone(header)
	header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte-order mark
	if layout == layoutAuto {
		layout = layoutGoogle
		if header[0] == genericHeader[0] {
			layout = layoutCSV
		}
	}
	rd := traceReader{cr: cr, limit: limit, t: &trace{layout: layout}, users: map[string]int32{}}
	switch layout {
	case layoutGoogle:
		err = rd.google(header)
	case layoutCSV:
		err = rd.generic(header)
	default:
		return nil, fmt.Errorf("trace: layout %q: want %s or %s", layout, layoutGoogle, layoutCSV)
	}
	if err != nil {
		return nil, err
	}
	t := rd.t
	if len(t.jobs) == 0 {
		return nil, errors.New("trace: no rows")
	}
	t.span = t.jobs[len(t.jobs)-1].at
	return t, nil
}

// traceReader holds what readTrace's layouts share: the CSV reader, the
// trace so far and its interned names.
type traceReader struct {
	cr    *csv.Reader
	limit int
	t     *trace
	users map[string]int32
}

// more reports whether another job may be read.
func (rd *traceReader) more() bool { return rd.limit == 0 || len(rd.t.jobs) < rd.limit }

// user returns the index of user name, adding it if new.
func (rd *traceReader) user(name string) int32 {
	return intern(rd.users, &rd.t.users, name)
}

// intern returns the index of name in *names, through index, appending
// a copy of it if new (the CSV reader reuses its records).
func intern(index map[string]int32, names *[]string, name string) int32 {
	if i, ok := index[name]; ok {
		return i
	}
	i := int32(len(*names))
	name = strings.Clone(name)
	index[name] = i
	*names = append(*names, name)
	return i
}

// google reads the rows of the Google layout: timestamp in µs.
func (rd *traceReader) google(header []string) error {
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	for _, name := range []string{"timestamp", "user", "logical_job_name"} {
		if _, ok := col[name]; !ok {
			return fmt.Errorf("trace: header: no column %q (the %s layout; the %s layout's header is %s[,%s])",
				name, layoutGoogle, layoutCSV, strings.Join(genericHeader, ","), genericCost)
		}
	}
	iTS, iUser, iLogical := col["timestamp"], col["user"], col["logical_job_name"]
	width := max(iTS, iUser, iLogical) + 1
	t := rd.t
	logicals := map[string]string{} // interned: programs repeat
	var first, prev int64
	for line := 2; rd.more(); line++ {
		rec, err := rd.cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		if len(rec) < width {
			return fmt.Errorf("trace: line %d: %d fields; want at least %d", line, len(rec), width)
		}
		ts, err := strconv.ParseInt(rec[iTS], 10, 64)
		if err != nil || ts < 0 {
			return fmt.Errorf("trace: line %d: timestamp %q: want microseconds, a non-negative integer", line, rec[iTS])
		}
		if len(t.jobs) == 0 {
			first, prev = ts, ts
		}
		if ts < prev {
			return fmt.Errorf("trace: line %d: timestamp %d before the previous row's %d", line, ts, prev)
		}
		if ts-first > int64(maxTraceOffset/time.Microsecond) {
			return fmt.Errorf("trace: line %d: timestamp %d more than a year after the first", line, ts)
		}
		prev = ts
		if rec[iUser] == "" {
			return fmt.Errorf("trace: line %d: empty user", line)
		}
		lg, ok := logicals[rec[iLogical]]
		if !ok {
			lg = strings.Clone(rec[iLogical])
			logicals[lg] = lg
		}
		t.jobs = append(t.jobs, job{
			at: time.Duration(ts-first) * time.Microsecond, user: rd.user(rec[iUser]),
			logical: lg, row: line - 1,
		})
	}
	return nil
}

// generic reads the rows of the generic layout: time_s in seconds from
// any origin, tenant, fairness_key (empty: the tenant), throttle_key
// (empty: none) and, if the header has it, cost in seconds of consumer
// time (empty: the default).
func (rd *traceReader) generic(header []string) error {
	withCost := len(header) == len(genericHeader)+1 && header[len(genericHeader)] == genericCost
	if !slices.Equal(header, genericHeader) && !(withCost && slices.Equal(header[:len(genericHeader)], genericHeader)) {
		return fmt.Errorf("trace: header %q: want %s[,%s] (the %s layout)", strings.Join(header, ","), strings.Join(genericHeader, ","), genericCost, layoutCSV)
	}
	width := len(header)
	t := rd.t
	keys, throttles := map[string]int32{}, map[string]int32{}
	var first, prev float64
	for line := 2; rd.more(); line++ {
		rec, err := rd.cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		if len(rec) != width {
			return fmt.Errorf("trace: line %d: %d fields; want %d", line, len(rec), width)
		}
		ts, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64)
		if err != nil || math.IsNaN(ts) || math.IsInf(ts, 0) {
			return fmt.Errorf("trace: line %d: time_s %q: want seconds, a finite number", line, rec[0])
		}
		if len(t.jobs) == 0 {
			first, prev = ts, ts
		}
		if ts < prev {
			return fmt.Errorf("trace: line %d: time_s %v before the previous row's %v", line, ts, prev)
		}
		if ts-first > maxTraceOffset.Seconds() {
			return fmt.Errorf("trace: line %d: time_s %v more than a year after the first", line, ts)
		}
		prev = ts
		if rec[1] == "" {
			return fmt.Errorf("trace: line %d: empty tenant", line)
		}
		j := job{at: seconds(ts - first), user: rd.user(rec[1]), row: line - 1}
		if rec[2] != "" {
			j.key = 1 + intern(keys, &t.keys, rec[2])
		}
		if rec[3] != "" {
			j.throttle = 1 + intern(throttles, &t.throttles, rec[3])
		}
		if withCost && rec[4] != "" {
			c, err := strconv.ParseFloat(strings.TrimSpace(rec[4]), 64)
			if err != nil || !(c > 0) || c > maxTraceOffset.Seconds() {
				return fmt.Errorf("trace: line %d: cost %q: want seconds of consumer time, a number above 0 and at most a year", line, rec[4])
			}
			j.cost = max(seconds(c), 1) // at least a nanosecond: 0 means the default
			t.costs = true
		}
		t.jobs = append(t.jobs, j)
	}
	return nil
}

// seconds converts s seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// fairnessKey returns job j's fairness key: its own, or its user's name.
func (t *trace) fairnessKey(j *job) string {
	if j.key > 0 {
		return t.keys[j.key-1]
	}
	return t.users[j.user]
}

// throttleKey returns job j's throttle key, "" for none.
func (t *trace) throttleKey(j *job) string {
	if j.throttle > 0 {
		return t.throttles[j.throttle-1]
	}
	return ""
}

// assignProviders gives each job of the Google layout a throttle key,
// its provider: "provider-<p>" with p = provider(logical_job_name, n).
// n = 0 leaves the jobs without throttle keys. The provider names are
// all n, whether or not a job has each.
func (t *trace) assignProviders(n int) {
	t.throttles = t.throttles[:0]
	for p := range n {
		t.throttles = append(t.throttles, providerName(p))
	}
	for i := range t.jobs {
		t.jobs[i].throttle = 0
		if n > 0 {
			t.jobs[i].throttle = 1 + int32(provider(t.jobs[i].logical, n))
		}
	}
}

// providerName names provider p's throttle key in a trace.
func providerName(p int) string { return "provider-" + strconv.Itoa(p) }

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

// longest returns the largest cost of a job, def for a job without one.
func (t *trace) longest(def time.Duration) time.Duration {
	longest := time.Duration(0)
	for _, j := range t.jobs {
		longest = max(longest, cmp.Or(j.cost, def))
	}
	return longest
}
