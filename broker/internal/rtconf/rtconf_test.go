package rtconf

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// memKV is an in-memory KV that records its operations and can be made to
// fail.
type memKV struct {
	mu   sync.Mutex
	m    map[string]string
	ops  []string // "put k=v", "delete k", in order
	fail error    // returned by Put and Delete when set
}

func newMemKV() *memKV { return &memKV{m: make(map[string]string)} }

func (kv *memKV) Put(key, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.fail != nil {
		return kv.fail
	}
	kv.m[string(key)] = string(value)
	kv.ops = append(kv.ops, "put "+string(key)+"="+string(value))
	return nil
}

func (kv *memKV) Delete(key []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.fail != nil {
		return kv.fail
	}
	delete(kv.m, string(key))
	kv.ops = append(kv.ops, "delete "+string(key))
	return nil
}

func (kv *memKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	kv.mu.Lock()
	keys := make([]string, 0, len(kv.m))
	for k := range kv.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = kv.m[k]
	}
	kv.mu.Unlock()
	buf := make([]byte, 0, 64) // reused across calls, as a real KV may
	for i, k := range keys {
		buf = append(buf[:0], k...)
		if err := fn(buf, []byte(vals[i])); err != nil {
			return err
		}
	}
	return nil
}

func mustOpen(t testing.TB, kv KV) *Store {
	t.Helper()
	s, err := Open(kv)
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	return s
}

func mustSet(t testing.TB, s *Store, key, value string) {
	t.Helper()
	if err := s.Set(key, value); err != nil {
		t.Fatalf("Set(%q, %q) = %v; want nil", key, value, err)
	}
}

func TestSetGetDelete(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	if v, ok := s.Get("routing.region"); ok {
		t.Fatalf("Get(%q) = %q, true; want not found", "routing.region", v)
	}
	mustSet(t, s, "routing.region", "eu")
	mustSet(t, s, "throttle.provider:stripe", "100,200")
	if v, ok := s.Get("routing.region"); !ok || v != "eu" {
		t.Errorf("Get(%q) = %q, %v; want \"eu\", true", "routing.region", v, ok)
	}
	if got := kv.m["c/throttle.provider:stripe"]; got != "100,200" {
		t.Errorf("stored c/throttle.provider:stripe = %q; want \"100,200\"", got)
	}
	mustSet(t, s, "routing.region", "us")
	if v, _ := s.Get("routing.region"); v != "us" {
		t.Errorf("Get(%q) after overwrite = %q; want \"us\"", "routing.region", v)
	}

	existed, err := s.Delete("routing.region")
	if err != nil || !existed {
		t.Errorf("Delete(%q) = %v, %v; want true, nil", "routing.region", existed, err)
	}
	if _, ok := s.Get("routing.region"); ok {
		t.Errorf("Get(%q) after Delete found it", "routing.region")
	}
	if _, ok := kv.m["c/routing.region"]; ok {
		t.Errorf("Delete(%q) left c/routing.region in the KV", "routing.region")
	}
	nops := len(kv.ops)
	existed, err = s.Delete("routing.region")
	if err != nil || existed {
		t.Errorf("Delete(missing) = %v, %v; want false, nil", existed, err)
	}
	if len(kv.ops) != nops {
		t.Errorf("Delete(missing) wrote to the KV: %v", kv.ops[nops:])
	}
}

func TestReopen(t *testing.T) {
	kv := newMemKV()
	kv.m["other/x"] = "not ours"
	s := mustOpen(t, kv)
	mustSet(t, s, "b", "2")
	mustSet(t, s, "a", "1")
	mustSet(t, s, "throttle.k", "5,10")
	mustSet(t, s, "gone", "x")
	if _, err := s.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	s2 := mustOpen(t, kv)
	want := []Entry{{"a", "1"}, {"b", "2"}, {"throttle.k", "5,10"}}
	if got := s2.List(""); !reflect.DeepEqual(got, want) {
		t.Errorf("List(\"\") after reopen = %v; want %v", got, want)
	}
	if kv.m["other/x"] != "not ours" {
		t.Errorf("store touched a key outside %q", KeyPrefix)
	}
}

func TestList(t *testing.T) {
	s := mustOpen(t, newMemKV())
	for _, k := range []string{"throttle.b", "throttle.a", "throttle", "thr", "tier.gold", "throttle.a.b", "z"} {
		mustSet(t, s, k, "v-"+k)
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"throttle.", []string{"throttle.a", "throttle.a.b", "throttle.b"}},
		{"throttle", []string{"throttle", "throttle.a", "throttle.a.b", "throttle.b"}},
		{"t", []string{"thr", "throttle", "throttle.a", "throttle.a.b", "throttle.b", "tier.gold"}},
		{"", []string{"thr", "throttle", "throttle.a", "throttle.a.b", "throttle.b", "tier.gold", "z"}},
		{"zz", nil},
		{"~", nil},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			var got []string
			for _, e := range s.List(tt.prefix) {
				if e.Value != "v-"+e.Key {
					t.Errorf("List(%q) entry %q has value %q", tt.prefix, e.Key, e.Value)
				}
				got = append(got, e.Key)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("List(%q) = %v; want %v", tt.prefix, got, tt.want)
			}
		})
	}
}

func TestValidateKey(t *testing.T) {
	valid := []string{"a", "throttle.provider:stripe", "routing.default_region", "ключ", "a b", strings.Repeat("k", MaxKeyLen)}
	for _, k := range valid {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v; want nil", k, err)
		}
	}
	invalid := []string{"", strings.Repeat("k", MaxKeyLen+1), "a\x00b", "a\nb", "tab\t", "del\x7f", "c1\u0085", "\xff\xfe"}
	for _, k := range invalid {
		err := ValidateKey(k)
		if !errors.Is(err, fault.ErrInvalidArgument) {
			t.Errorf("ValidateKey(%q) = %v; want an error wrapping fault.ErrInvalidArgument", k, err)
		}
	}
}

func TestSetRejects(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	tests := []struct {
		name       string
		key, value string
		want       error
	}{
		{"empty key", "", "v", fault.ErrInvalidArgument},
		{"long key", strings.Repeat("k", MaxKeyLen+1), "v", fault.ErrInvalidArgument},
		{"control character", "a\nb", "v", fault.ErrInvalidArgument},
		{"long value", "k", strings.Repeat("v", MaxValueLen+1), fault.ErrInvalidArgument},
		{"value not UTF-8", "k", "\xff", fault.ErrInvalidArgument},
		{"reserved prefix", "fila.anything", "v", fault.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Set(tt.key, tt.value); !errors.Is(err, tt.want) {
				t.Errorf("Set(%.20q, %.20q) = %v; want an error wrapping %v", tt.key, tt.value, err, tt.want)
			}
		})
	}
	if len(kv.ops) != 0 {
		t.Errorf("rejected Sets wrote to the KV: %v", kv.ops)
	}
	if err := s.Set("k", strings.Repeat("v", MaxValueLen)); err != nil {
		t.Errorf("Set(k, %d bytes) = %v; want nil", MaxValueLen, err)
	}
}

// parseRateBurst stands in for the scheduler's "rate,burst" parser.
func parseRateBurst(key, value string) error {
	r, b, ok := strings.Cut(value, ",")
	if _, err := strconv.ParseFloat(r, 64); !ok || err != nil {
		return fmt.Errorf("throttle %q: %w: want \"rate,burst\"", value, fault.ErrInvalidConfigValue)
	}
	if _, err := strconv.ParseFloat(b, 64); err != nil {
		return errors.New("burst is not a number") // does not wrap the fault
	}
	return nil
}

func TestValidators(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	s.RegisterValidator(ThrottlePrefix, parseRateBurst)
	var events []string
	s.Watch(ThrottlePrefix, func(k, v string, deleted bool) { events = append(events, k+"="+v) })

	mustSet(t, s, "throttle.stripe", "100,200")
	for _, bad := range []string{"fast", "100,lots"} {
		err := s.Set("throttle.stripe", bad)
		if !errors.Is(err, fault.ErrInvalidConfigValue) {
			t.Errorf("Set(throttle.stripe, %q) = %v; want an error wrapping fault.ErrInvalidConfigValue", bad, err)
		}
		if err != nil && !strings.Contains(err.Error(), "throttle.stripe") {
			t.Errorf("Set(throttle.stripe, %q) error %q; want it to name the key", bad, err)
		}
	}
	if err := s.Set("throttle.stripe", "fast"); strings.Count(err.Error(), "invalid config value") != 1 {
		t.Errorf("Set error = %q; want the fault named once", err)
	}
	if v, _ := s.Get("throttle.stripe"); v != "100,200" {
		t.Errorf("Get(throttle.stripe) = %q after rejected Sets; want \"100,200\"", v)
	}
	if want := []string{"throttle.stripe=100,200"}; !reflect.DeepEqual(events, want) {
		t.Errorf("watch events = %v; want %v", events, want)
	}
	if want := []string{"put c/throttle.stripe=100,200"}; !reflect.DeepEqual(kv.ops, want) {
		t.Errorf("KV ops = %v; want %v", kv.ops, want)
	}
	mustSet(t, s, "throttlex", "fast") // another prefix: not validated

	// Every matching validator runs, in registration order.
	var order []string
	s.RegisterValidator("throttle.a", func(k, v string) error { order = append(order, "throttle.a"); return nil })
	s.RegisterValidator("throttle.", func(k, v string) error { order = append(order, "throttle."); return nil })
	mustSet(t, s, "throttle.ab", "1,1")
	if want := []string{"throttle.a", "throttle."}; !reflect.DeepEqual(order, want) {
		t.Errorf("validators ran %v; want %v", order, want)
	}
}

func TestBrokerPrefix(t *testing.T) {
	s := mustOpen(t, newMemKV())
	if err := s.Set("fila.flag", "on"); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Errorf("Set(fila.flag) = %v; want an error wrapping fault.ErrInvalidArgument", err)
	}
	s.RegisterValidator("fila.flag", func(k, v string) error {
		if v != "on" && v != "off" {
			return fmt.Errorf("%w: want on or off", fault.ErrInvalidConfigValue)
		}
		return nil
	})
	mustSet(t, s, "fila.flag", "on")
	if err := s.Set("fila.flag", "maybe"); !errors.Is(err, fault.ErrInvalidConfigValue) {
		t.Errorf("Set(fila.flag, maybe) = %v; want fault.ErrInvalidConfigValue", err)
	}
	if err := s.Set("fila.other", "on"); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Errorf("Set(fila.other) = %v; want fault.ErrInvalidArgument", err)
	}
}

func TestWatch(t *testing.T) {
	s := mustOpen(t, newMemKV())
	mustSet(t, s, "throttle.b", "2,2")
	mustSet(t, s, "throttle.a", "1,1")
	mustSet(t, s, "routing.x", "y")

	var events []string
	s.Watch(ThrottlePrefix, func(k, v string, deleted bool) {
		if got, ok := s.Get(k); ok == deleted || (!deleted && got != v) {
			t.Errorf("watcher(%q, %q, %v): Get = %q, %v; want the change already visible", k, v, deleted, got, ok)
		}
		events = append(events, fmt.Sprintf("%s=%s/%v", k, v, deleted))
	})
	mustSet(t, s, "throttle.c", "3,3")
	mustSet(t, s, "routing.x", "z")
	mustSet(t, s, "throttle.a", "1,1") // unchanged: no event
	mustSet(t, s, "throttle.a", "9,9")
	if _, err := s.Delete("throttle.b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete("throttle.zz"); err != nil { // missing: no event
		t.Fatal(err)
	}
	want := []string{
		"throttle.a=1,1/false", "throttle.b=2,2/false", // replayed at Watch
		"throttle.c=3,3/false",
		"throttle.a=9,9/false",
		"throttle.b=/true",
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("watch events = %v; want %v", events, want)
	}
}

func TestKVFailure(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	mustSet(t, s, "k", "1")
	var events int
	s.Watch("", func(string, string, bool) { events++ })
	events = 0

	boom := errors.New("disk full")
	kv.fail = boom
	if err := s.Set("k", "2"); !errors.Is(err, boom) {
		t.Errorf("Set with a failing KV = %v; want it to wrap %v", err, boom)
	}
	if existed, err := s.Delete("k"); !errors.Is(err, boom) || existed {
		t.Errorf("Delete with a failing KV = %v, %v; want false and an error wrapping %v", existed, err, boom)
	}
	if v, _ := s.Get("k"); v != "1" {
		t.Errorf("Get(k) = %q after failed changes; want \"1\"", v)
	}
	if events != 0 {
		t.Errorf("watchers saw %d events of failed changes; want 0", events)
	}
}

func TestOpenErrors(t *testing.T) {
	boom := errors.New("io error")
	if _, err := Open(scanErrKV{boom}); !errors.Is(err, boom) {
		t.Errorf("Open(failing scan) = %v; want an error wrapping %v", err, boom)
	}
	for _, bad := range []struct{ key, value string }{{"c/", "v"}, {"c/a\x00", "v"}, {"c/k", "\xff"}} {
		kv := newMemKV()
		kv.m[bad.key] = bad.value
		if _, err := Open(kv); err == nil || !strings.HasPrefix(err.Error(), "load runtime config: ") {
			t.Errorf("Open(stored %q=%q) = %v; want a load runtime config: error", bad.key, bad.value, err)
		}
	}
}

type scanErrKV struct{ err error }

func (kv scanErrKV) Put(key, value []byte) error { return nil }
func (kv scanErrKV) Delete(key []byte) error     { return nil }
func (kv scanErrKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return kv.err
}

// TestConcurrentGetDuringSet runs readers against a writer; run it with
// -race. Each reader must see every key's version never go backwards, and
// the watcher must see the changes in the order the KV stored them.
func TestConcurrentGetDuringSet(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	var events []string
	s.Watch("", func(k, v string, deleted bool) {
		if deleted {
			events = append(events, "delete "+KeyPrefix+k)
		} else {
			events = append(events, "put "+KeyPrefix+k+"="+v)
		}
	})
	const (
		writers = 4
		keys    = 8
		rounds  = 300
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := make([]int, keys)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for k := 0; k < keys; k++ {
					v, ok := s.Get("key." + strconv.Itoa(k))
					if !ok {
						continue
					}
					n, err := strconv.Atoi(v)
					if err != nil || n < last[k] {
						t.Errorf("Get(key.%d) = %q after seeing %d; want a version no older", k, v, last[k])
						return
					}
					last[k] = n
				}
				_ = s.List("key.")
			}
		}()
	}
	var wwg sync.WaitGroup
	var versionMu sync.Mutex
	version := make([]int, keys)
	for w := 0; w < writers; w++ {
		wwg.Add(1)
		go func(w int) {
			defer wwg.Done()
			for i := 0; i < rounds; i++ {
				k := (w + i) % keys
				// Versions per key increase in the order Sets happen:
				// take the next version and set it under one lock.
				versionMu.Lock()
				version[k]++
				err := s.Set("key."+strconv.Itoa(k), strconv.Itoa(version[k]))
				versionMu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					_, _ = s.Delete("scratch." + strconv.Itoa(w))
					_ = s.Set("scratch."+strconv.Itoa(w), "x")
				}
			}
		}(w)
	}
	wwg.Wait()
	close(stop)
	wg.Wait()
	if !reflect.DeepEqual(events, kv.ops) {
		t.Errorf("watcher saw %d events, KV stored %d ops; want the same sequence", len(events), len(kv.ops))
	}
	for k := 0; k < keys; k++ {
		if v, _ := s.Get("key." + strconv.Itoa(k)); v != strconv.Itoa(version[k]) {
			t.Errorf("Get(key.%d) = %q; want %d", k, v, version[k])
		}
	}
}

// TestConcurrentSetOrder has many goroutines change keys at once (without
// an outer lock) and checks that watchers see exactly the KV's order.
func TestConcurrentSetOrder(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	var events []string
	s.Watch("", func(k, v string, deleted bool) {
		if deleted {
			events = append(events, "delete "+KeyPrefix+k)
		} else {
			events = append(events, "put "+KeyPrefix+k+"="+v)
		}
	})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				key := "k" + strconv.Itoa(i%5)
				if i%7 == 0 {
					_, _ = s.Delete(key)
				} else {
					_ = s.Set(key, strconv.Itoa(w*1000+i))
				}
			}
		}(w)
	}
	wg.Wait()
	if !reflect.DeepEqual(events, kv.ops) {
		t.Errorf("watcher order differs from the KV's order (%d events, %d ops)", len(events), len(kv.ops))
	}
	// The snapshot agrees with the KV.
	var fromKV []Entry
	_ = kv.Scan([]byte(KeyPrefix), func(k, v []byte) error {
		fromKV = append(fromKV, Entry{string(bytes.TrimPrefix(k, []byte(KeyPrefix))), string(v)})
		return nil
	})
	if got := s.List(""); !reflect.DeepEqual(got, fromKV) {
		t.Errorf("List(\"\") = %v; KV holds %v", got, fromKV)
	}
}

func FuzzOpen(f *testing.F) {
	f.Add([]byte("c/throttle.k"), []byte("1,2"))
	f.Add([]byte("c/"), []byte(""))
	f.Add([]byte("c/a\x00"), []byte("v"))
	f.Add([]byte("c/k"), []byte("\xff"))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		kv := newMemKV()
		kv.m[string(key)] = string(value)
		s, err := Open(kv)
		if err != nil {
			return
		}
		k, ok := strings.CutPrefix(string(key), KeyPrefix)
		if !ok {
			if len(s.List("")) != 0 {
				t.Fatalf("Open loaded %v from a key outside the prefix", s.List(""))
			}
			return
		}
		if ValidateKey(k) != nil {
			t.Fatalf("Open accepted stored key %q", k)
		}
		if v, ok := s.Get(k); !ok || v != string(value) {
			t.Fatalf("Get(%q) = %q, %v; want %q, true", k, v, ok, value)
		}
	})
}
