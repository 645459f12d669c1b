//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"sync"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The Exchange crash harness's log (crash_exchange_test.go): what the clients saw acknowledged,
// and, per owner, how many of its calls had their answers swallowed by a kill. The checker
// (crash_exchange_check_test.go) holds the ledger to it: an acknowledged fact must show in the
// ledger, and a ledger entry the clients never saw must be explained by a call in flight at a kill.

// exKey is one (message, recipient) of the ledger; recipient "" is the outbox entry.
type exKey struct{ msg, recipient string }

// exSend is an acknowledged Send.
type exSend struct {
	sender, token string
}

// exLog is the clients' view, shared by the workers under mu.
type exLog struct {
	mu    sync.Mutex
	sends map[string]*exSend // by message id
	ids   map[string]string  // token (request id) -> message id
	// collects has the delivery report of each message an acknowledged Collect routed.
	collects map[string]*historyv1.MessageDelivery
	pops     map[exKey]int // messages the clients saw popped, by (message, owner): must stay 1
	// returned are what acknowledged Unregisters returned: outbox entries (recipient ""), inbox
	// entries (the owner); returnedDead counts the returned dead letters of each message.
	returned     map[exKey]bool
	returnedDead map[string]int
	// Leases (issue 18): grants has the attempt of every lease a client was handed, by (message,
	// owner), from Lease responses and leasing streams alike; acks the attempt of each receipt an
	// Ack removed (a second Ack of one message is a duplicate); nackDead the attempt of each Nack
	// that answered dead_lettered.
	grants   map[exKey][]int
	acks     map[exKey][]int
	nackDead map[exKey]int
	// Calls in flight at a kill, by owner: their effect may be in the ledger with no client that
	// saw it (allowed; counted separately). An Ack's makes an acked entry no client saw.
	unseenPops, unseenCollects, unseenUnregisters, unseenAcks map[string]int
	// violations the workers found in responses: messages handed out twice, or unknown.
	problems []exProblem
	// acknowledged calls, for the report
	sendsAcked, collectsAcked, popsAcked, receivesAcked, unregistersAcked int
	leasesAcked, acksAcked, nacksAcked, extendsAcked, staleAcked          int
}

// exProblem is a violation seen in a response.
type exProblem struct {
	duplicated bool // else lost
	what       string
}

func newExLog() *exLog {
	return &exLog{
		sends: map[string]*exSend{}, ids: map[string]string{}, collects: map[string]*historyv1.MessageDelivery{},
		pops: map[exKey]int{}, returned: map[exKey]bool{}, returnedDead: map[string]int{},
		grants: map[exKey][]int{}, acks: map[exKey][]int{}, nackDead: map[exKey]int{},
		unseenPops: map[string]int{}, unseenCollects: map[string]int{}, unseenUnregisters: map[string]int{}, unseenAcks: map[string]int{},
	}
}

func (l *exLog) problem(duplicated bool, format string, args ...any) error {
	l.problems = append(l.problems, exProblem{duplicated: duplicated, what: fmt.Sprintf(format, args...)})
	return nil
}

// inFlight counts a call of owner whose answer a kill swallowed.
func (l *exLog) inFlight(m map[string]int, owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m[owner]++
}

// sent records an acknowledged Send (or its retry after a kill).
func (l *exLog) sent(owner, token, id, sender string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sendsAcked++
	if sender != owner {
		return fmt.Errorf("Send %s from %s acknowledged with sender %q", token, owner, sender)
	}
	if prev, ok := l.ids[token]; ok && prev != id {
		return l.problem(true, "Send %s acknowledged twice, as %s and as %s", token, prev, id)
	}
	if s, ok := l.sends[id]; ok && s.token != token {
		return l.problem(true, "message %s acknowledged for Send %s and for Send %s", id, s.token, token)
	}
	l.ids[token], l.sends[id] = id, &exSend{sender: owner, token: token}
	return nil
}

// known reports whether id is an acknowledged Send's message, recording a problem if not. The
// caller holds mu.
func (l *exLog) known(id, where string) bool {
	if _, ok := l.sends[id]; !ok {
		l.problem(true, "%s: message %s, which no acknowledged Send made", where, id)
		return false
	}
	return true
}

// collected records an acknowledged Collect's report: each message routed once, from this owner.
func (l *exLog) collected(owner string, r *historyv1.CollectResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.collectsAcked++
	if r.GetReportTruncated() || len(r.GetDeliveries()) != int(r.GetCollectedCount()) {
		return fmt.Errorf("Collect %s: report of %d messages for %d collected (truncated %v): the harness's messages are small",
			owner, len(r.GetDeliveries()), r.GetCollectedCount(), r.GetReportTruncated())
	}
	for _, d := range r.GetDeliveries() {
		id := d.GetMessageId()
		where := "Collect " + owner
		if !l.known(id, where) {
			continue
		}
		if s := l.sends[id]; s.sender != owner {
			l.problem(true, "%s routed message %s of %s's outbox", where, id, s.sender)
		}
		if _, ok := l.collects[id]; ok {
			l.problem(true, "%s routed message %s, which an earlier acknowledged Collect routed", where, id)
		}
		if l.returned[exKey{id, ""}] {
			l.problem(true, "%s routed message %s, which an Unregister returned from the outbox", where, id)
		}
		l.collects[id] = d
	}
	return nil
}

// popped records a message a PopMessage handed out to owner from sender's inbox.
func (l *exLog) popped(owner, sender string, m *historyv1.Message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.popsAcked++
	id := m.GetId()
	where := fmt.Sprintf("PopMessage %s from %s's inbox", owner, sender)
	if !l.known(id, where) {
		return nil
	}
	if s := l.sends[id]; s.sender != sender {
		return fmt.Errorf("%s: message %s is %s's", where, id, s.sender)
	}
	k := exKey{id, owner}
	l.pops[k]++
	if l.pops[k] > 1 {
		l.problem(true, "%s: message %s handed out %d times", where, id, l.pops[k])
	}
	if l.returned[k] {
		l.problem(true, "%s: message %s, which an Unregister returned", where, id)
	}
	if len(l.acks[k]) > 0 {
		l.problem(true, "%s: message %s, which an Ack removed", where, id)
	}
	return nil
}

// received checks a Receive's messages: each made by an acknowledged Send, not popped, and not
// acknowledged before the Receive was sent; and each leased before it was sent is marked leased
// with at least that attempt (issue 18: "Receive (a peek) shows leased messages marked as
// leased"). before is the owner's leases and Acks logged by then (leaseSnapshot): the leasing
// receiver acknowledges concurrently with the worker's Receive.
func (l *exLog) received(owner string, r *historyv1.ReceiveResponse, before exLeaseSnapshot) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.receivesAcked++
	for _, m := range r.GetMessages() {
		id := m.GetId()
		if !l.known(id, "Receive "+owner) {
			continue
		}
		k := exKey{id, owner}
		if l.pops[k] > 0 {
			l.problem(true, "Receive %s: message %s, which a PopMessage handed out, is still in the inbox", owner, id)
		}
		if before.acked[id] {
			l.problem(true, "Receive %s: message %s, which an Ack removed, is still in the inbox", owner, id)
		}
		if a := before.granted[id]; a > 0 && int(r.GetLeases()[id].GetAttempts()) < a {
			l.problem(false, "Receive %s: message %s, leased with attempt %d before the Receive, has lease state %v", owner, id, a, r.GetLeases()[id])
		}
	}
	return nil
}

// exLeaseSnapshot is what the clients saw of one owner's leases at a moment: the highest attempt
// granted of each message, and the messages acknowledged.
type exLeaseSnapshot struct {
	granted map[string]int
	acked   map[string]bool
}

// leaseSnapshot returns owner's leases and Acks logged so far.
func (l *exLog) leaseSnapshot(owner string) exLeaseSnapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := exLeaseSnapshot{granted: map[string]int{}, acked: map[string]bool{}}
	for k, as := range l.grants {
		if k.recipient == owner {
			out.granted[k.msg] = slices.Max(as)
		}
	}
	for k := range l.acks {
		if k.recipient == owner {
			out.acked[k.msg] = true
		}
	}
	return out
}

// leased records the messages a Lease response or a leasing stream handed to owner. Each attempt
// of a message is handed out once: the same attempt twice means two receivers held it at once.
func (l *exLog) leased(owner, where string, ls []*historyv1.LeasedMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range ls {
		l.leasesAcked++
		id := m.GetMessage().GetId()
		if !l.known(id, where) {
			continue
		}
		if s := l.sends[id]; s.sender != m.GetMessage().GetSender().GetStringValue() {
			l.problem(true, "%s: leased message %s names sender %s, %s sent it", where, id, m.GetMessage().GetSender().GetStringValue(), s.sender)
		}
		k := exKey{id, owner}
		a := int(m.GetAttempt())
		if slices.Contains(l.grants[k], a) {
			l.problem(true, "%s: message %s leased twice with attempt %d", where, id, a)
		}
		if a < 1 || a > exCrashMaxAttempts {
			l.problem(true, "%s: message %s leased with attempt %d, max_attempts is %d", where, id, a, exCrashMaxAttempts)
		}
		l.grants[k] = append(l.grants[k], a)
	}
}

// acked records an Ack of a lease of owner's that succeeded: the message is gone, once.
func (l *exLog) acked(owner string, h exHeld) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acksAcked++
	k := exKey{h.msg, owner}
	where := fmt.Sprintf("Ack %s of message %s, attempt %d", owner, h.msg, h.attempt)
	if len(l.acks[k]) > 0 {
		l.problem(true, "%s: the message was acknowledged before (attempts %v)", where, l.acks[k])
	}
	if l.pops[k] > 0 {
		l.problem(true, "%s: a PopMessage handed it out", where)
	}
	if l.returned[k] {
		l.problem(true, "%s: an Unregister returned it", where)
	}
	l.acks[k] = append(l.acks[k], h.attempt)
}

// nacked records a Nack of a lease of owner's that succeeded; dead when the message reached
// max_attempts and became a dead letter.
func (l *exLog) nacked(owner string, h exHeld, dead bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nacksAcked++
	if dead {
		l.nackDead[exKey{h.msg, owner}] = h.attempt
		if h.attempt != exCrashMaxAttempts {
			l.problem(true, "Nack %s of message %s, attempt %d: dead-lettered before max_attempts %d", owner, h.msg, h.attempt, exCrashMaxAttempts)
		}
	}
}

// settledStale counts an Ack, Nack or ExtendLease refused as stale (the lease had moved on:
// expected of leases left to expire) or because the owner had left.
func (l *exLog) settledStale() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.staleAcked++
}

// extended counts an ExtendLease that succeeded.
func (l *exLog) extended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.extendsAcked++
}

// unregistered records what an acknowledged Unregister returned.
func (l *exLog) unregistered(owner string, f *historyv1.Flow) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unregistersAcked++
	if f == nil {
		return fmt.Errorf("Unregister %s: no flow, and the owner was registered", owner)
	}
	where := "Unregister " + owner
	for _, m := range f.GetOutbox() {
		if !l.known(m.GetId(), where) {
			continue
		}
		if _, ok := l.collects[m.GetId()]; ok {
			l.problem(true, "%s returned message %s from the outbox, which an acknowledged Collect routed", where, m.GetId())
		}
		l.returned[exKey{m.GetId(), ""}] = true
	}
	for _, in := range f.GetInboxes() {
		for _, m := range in.GetMessages() {
			k := exKey{m.GetId(), owner}
			if !l.known(m.GetId(), where) {
				continue
			}
			if l.pops[k] > 0 {
				l.problem(true, "%s returned message %s from %s's inbox, which a PopMessage handed out", where, m.GetId(), in.GetSender())
			}
			if len(l.acks[k]) > 0 {
				l.problem(true, "%s returned message %s from %s's inbox, which an Ack removed", where, m.GetId(), in.GetSender())
			}
			l.returned[k] = true
		}
	}
	for _, d := range f.GetDeadLetters() {
		id := d.GetMessage().GetId()
		if !l.known(id, where) {
			continue
		}
		// A max-attempts dead letter is the owner's as the recipient (issue 18): its ledger entry
		// is (message, owner); the others are the owner's as the sender.
		if d.GetReason() == historyv1.DeadLetterReason_DEAD_LETTER_REASON_MAX_ATTEMPTS {
			k := exKey{id, owner}
			if l.pops[k] > 0 || len(l.acks[k]) > 0 {
				l.problem(true, "%s returned message %s as a max-attempts dead letter, which a PopMessage or an Ack took", where, id)
			}
			l.returned[k] = true
			continue
		}
		l.returnedDead[id]++
	}
	return nil
}
