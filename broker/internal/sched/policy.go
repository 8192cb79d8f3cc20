package sched

import (
	"fmt"

	"github.com/fila-mq/fila/broker/internal/sched/drr"
	"github.com/fila-mq/fila/broker/internal/sched/stfq"
)

// The fair scheduling policies a queue may use across its fairness keys
// (QueueSpec.Policy, Config.Policy).
const (
	// PolicyDRR is deficit round robin (drr): each backlogged key earns
	// weight × quantum payload bytes per round. Shares hold over whole
	// rounds, in payload bytes.
	PolicyDRR = "drr"
	// PolicySTFQ is start-time fair queueing (stfq): each backlogged key
	// is served in order of its virtual start tag, which one message
	// advances by 1/weight. Shares hold at every time scale, in messages:
	// two keys backlogged over any interval are served, per unit of
	// weight, within 1/w_i + 1/w_j messages of each other.
	PolicySTFQ = "stfq"
	// DefaultPolicy is the policy of queues when Config.Policy is empty.
	DefaultPolicy = PolicyDRR
)

// Policies lists the accepted policy names.
var Policies = []string{PolicyDRR, PolicySTFQ}

// CheckPolicy returns nil if name is a policy, or "" (the default); else
// a *SettingError for the setting "policy".
func CheckPolicy(name string) *SettingError {
	switch name {
	case "", PolicyDRR, PolicySTFQ:
		return nil
	}
	return &SettingError{Setting: "policy", Value: fmt.Sprintf("%q", name), Want: `"drr" or "stfq"`}
}

// fair is a queue's fair scheduler across its fairness keys: one of the
// two policies, behind one set of operations. The keys embed the state of
// both (a few dozen bytes each); a queue uses one.
type fair struct {
	stfq bool
	drr  drr.Scheduler[*fkey]
	fq   stfq.Scheduler[*fkey]
}

// STFQ returns the key's start-time fair queueing flow (stfq.Node).
func (k *fkey) STFQ() *stfq.Flow[*fkey] { return &k.sflow }

func (f *fair) init(policy string, quantum int64) {
	f.stfq = policy == PolicySTFQ
	f.drr.Init(quantum)
}

// next returns the key to serve next.
func (f *fair) next() (*fkey, bool) {
	if f.stfq {
		return f.fq.Next()
	}
	return f.drr.Next()
}

// charge accounts one message of payload cost bytes served from k, the key
// next returned: DRR charges the bytes, STFQ one message.
func (f *fair) charge(k *fkey, cost int64) {
	if f.stfq {
		f.fq.Charge(k, 1)
		return
	}
	f.drr.Charge(k, cost)
}

// activate adds a key that has just become backlogged.
func (f *fair) activate(k *fkey) {
	if f.stfq {
		f.fq.Activate(k)
		return
	}
	f.drr.Activate(k)
}

// resume returns a backlogged key that was taken out (no lane could run):
// DRR keeps its deficit; STFQ gives it max(V, its tag), no credit for the
// time out.
func (f *fair) resume(k *fkey) {
	if f.stfq {
		f.fq.Activate(k)
		return
	}
	f.drr.Resume(k)
}

// remove takes a backlogged key out, keeping its state for resume.
func (f *fair) remove(k *fkey) {
	if f.stfq {
		f.fq.Remove(k)
		return
	}
	f.drr.Remove(k)
}

// forget takes out a key with nothing pending. DRR clears its deficit;
// STFQ keeps its tag while the key exists, so that a key that empties and
// refills at once gains nothing.
func (f *fair) forget(k *fkey) {
	if f.stfq {
		f.fq.Remove(k)
		return
	}
	f.drr.Forget(k)
}

// setWeight sets k's weight.
func (f *fair) setWeight(k *fkey, w uint32) {
	f.drr.SetWeight(k, w)
	f.fq.SetWeight(k, w)
}

// active reports whether k is in the scheduler.
func (f *fair) active(k *fkey) bool {
	if f.stfq {
		return k.sflow.Active()
	}
	return k.flow.Active()
}

// weight returns k's weight.
func (f *fair) weight(k *fkey) uint32 { return k.flow.Weight() }

// name returns the policy's name.
func (f *fair) name() string {
	if f.stfq {
		return PolicySTFQ
	}
	return PolicyDRR
}
