//go:build e2e

package e2e

import (
	"fmt"
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
	// Calls in flight at a kill, by owner: their effect may be in the ledger with no client that
	// saw it (allowed; counted separately).
	unseenPops, unseenCollects, unseenUnregisters map[string]int
	// violations the workers found in responses: messages handed out twice, or unknown.
	problems []exProblem
	// acknowledged calls, for the report
	sendsAcked, collectsAcked, popsAcked, receivesAcked, unregistersAcked int
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
		unseenPops: map[string]int{}, unseenCollects: map[string]int{}, unseenUnregisters: map[string]int{},
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
	return nil
}

// received checks a Receive's messages: each made by an acknowledged Send and not yet popped.
func (l *exLog) received(owner string, msgs []*historyv1.Message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.receivesAcked++
	for _, m := range msgs {
		if l.known(m.GetId(), "Receive "+owner) && l.pops[exKey{m.GetId(), owner}] > 0 {
			l.problem(true, "Receive %s: message %s, which a PopMessage handed out, is still in the inbox", owner, m.GetId())
		}
	}
	return nil
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
			l.returned[k] = true
		}
	}
	for _, d := range f.GetDeadLetters() {
		if l.known(d.GetMessage().GetId(), where) {
			l.returnedDead[d.GetMessage().GetId()]++
		}
	}
	return nil
}
