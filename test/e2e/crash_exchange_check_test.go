//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/historyd/historyd/internal/exchange"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The Exchange crash harness's checker (crash_exchange_test.go; issue 17: "each delivery of an
// acknowledged Send is, at any moment and after any crash, in exactly one state"). It holds the
// ledger the killed server left (read before the restart, crash_exchange_ledger_test.go) to the
// clients' log, then the restarted server's answers to that ledger:
//   - every acknowledged Send has its entries: its outbox entry, or, once collected, one per
//     recipient its Collect considered (as the report said, when the report was seen);
//   - each (message, recipient) has exactly one entry;
//   - every message a client popped is popped in the ledger, and was handed out to one client once
//     (exLog); a popped entry no client saw is allowed only as far as pops were in flight at kills
//     (counted separately); likewise returned entries and routed messages with no report, for
//     Unregisters and Collects in flight;
//   - everything in state inbox is what Receive returns after the restart, owner by owner; the
//     outbox entries are each owner's queued_count; the dead entries its ListDeadLetters;
//   - leases (issue 18): a message a client leased is leased in the ledger with at least the
//     attempts seen, or in a state that ends a delivery (acked, popped, returned, or a dead letter
//     for max attempts); every message a client acknowledged is acked in the ledger with the
//     receipt's attempt, was acknowledged once, and was never popped, returned or handed out
//     again (exLog); an acked entry no client saw is allowed only as far as Acks were in flight at
//     kills; a max-attempts dead letter has exactly max_attempts attempts. A leased entry whose
//     attempts reached max_attempts may become a dead letter as the restarted server answers (a
//     call that reads the owner's inboxes notices an expired lease): Receive may leave it out,
//     and ListDeadLetters list it.
// Lost is an acknowledged thing the ledger or the server lacks; duplicated is something present
// twice, handed out twice, or that no acknowledged call made.

// exLedger is a ledger read, indexed.
type exLedger struct {
	byMsg map[string]map[string]exchange.LedgerEntry // message -> recipient -> entry
	ids   map[string]bool                            // messages with an entry
}

// indexLedger indexes entries, reporting a (message, recipient) listed twice.
func (r *exRun) indexLedger(entries []exchange.LedgerEntry) *exLedger {
	l := &exLedger{byMsg: map[string]map[string]exchange.LedgerEntry{}, ids: map[string]bool{}}
	for _, e := range entries {
		id := e.Message.String()
		m := l.byMsg[id]
		if m == nil {
			m = map[string]exchange.LedgerEntry{}
			l.byMsg[id] = m
		}
		if prev, ok := m[e.Recipient]; ok {
			r.violate(&r.duplicated, "ledger: (%s, %q) is listed twice, %s and %s", id, e.Recipient, prev.State, e.State)
		}
		m[e.Recipient] = e
		l.ids[id] = true
		r.states[e.State]++
		if maxAttemptsDead(e) {
			r.maxDead++
		}
	}
	return l
}

// maxAttemptsDead reports whether e is a dead letter (kept or evicted) for max attempts: the
// recipient's, after its leases (issue 18).
func maxAttemptsDead(e exchange.LedgerEntry) bool {
	return (e.State == exchange.LedgerDead || e.State == exchange.LedgerEvicted) && e.Reason == exchange.ReasonMaxAttempts
}

// checkLedger holds the ledger to the clients' log. The Sends in flight at the kill are not in the
// log yet: checkUnknown, after their retries, checks that every message in the ledger is one.
func (r *exRun) checkLedger(l *exLedger) {
	lg := r.log
	lg.mu.Lock()
	defer lg.mu.Unlock()
	r.routedUnseen, r.returnedUnseen = 0, 0 // counted afresh over the whole ledger
	for _, id := range slices.Sorted(maps.Keys(lg.sends)) {
		r.checkMessage(l, id, lg.sends[id])
	}
	// Popped entries: each a pop a client saw, or one in flight at a kill.
	unseen := l.unseen(exchange.LedgerPopped, func(k exKey) bool { return lg.pops[k] > 0 })
	r.poppedUnseen = 0
	for owner, n := range unseen {
		r.poppedUnseen += n
		if allowed := lg.unseenPops[owner]; n > allowed {
			r.violate(&r.lost, "ledger: %d messages popped at %s that no client received, and %d pops of it were in flight at kills", n, owner, allowed)
		}
	}
	for k, n := range lg.pops {
		if n == 0 {
			continue
		}
		switch e, ok := l.byMsg[k.msg][k.recipient]; {
		case !ok:
			r.violate(&r.lost, "ledger: message %s, popped by %s, has no entry for it", k.msg, k.recipient)
		case e.State != exchange.LedgerPopped:
			r.violate(&r.duplicated, "ledger: message %s, popped by %s, is %s there: it can be handed out again", k.msg, k.recipient, e.State)
		}
	}
	r.checkLeases(l)
}

// checkLeases holds the ledger's leased and acked entries to the leases and Acks the clients saw
// (issue 18). The caller holds the log's lock.
func (r *exRun) checkLeases(l *exLedger) {
	lg := r.log
	// Acked entries: each an Ack a client saw, or one in flight at a kill.
	unseen := l.unseen(exchange.LedgerAcked, func(k exKey) bool { return len(lg.acks[k]) > 0 })
	r.ackedUnseen = 0
	for owner, n := range unseen {
		r.ackedUnseen += n
		if allowed := lg.unseenAcks[owner]; n > allowed {
			r.violate(&r.lost, "ledger: %d messages acked at %s that no client acknowledged, and %d Acks of it were in flight at kills", n, owner, allowed)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(lg.acks), compareExKeys) {
		a := lg.acks[k][0]
		switch e, ok := l.byMsg[k.msg][k.recipient]; {
		case !ok:
			r.violate(&r.lost, "ledger: message %s, acknowledged by %s, has no entry for it", k.msg, k.recipient)
		case e.State != exchange.LedgerAcked:
			r.violate(&r.duplicated, "ledger: message %s, acknowledged by %s (attempt %d), is %s there: it can be handed out again", k.msg, k.recipient, a, e.State)
		case e.Attempts != a:
			r.violate(&r.duplicated, "ledger: message %s, acknowledged by %s with attempt %d, is acked after %d attempts", k.msg, k.recipient, a, e.Attempts)
		}
	}
	// Every message a client leased: no lease after the one acknowledged or the Nack that made a
	// dead letter of it, and its entry is where its leases can lead.
	for _, k := range slices.SortedFunc(maps.Keys(lg.grants), compareExKeys) {
		top := slices.Max(lg.grants[k])
		if as := lg.acks[k]; len(as) > 0 && as[0] != top {
			r.violate(&r.duplicated, "message %s at %s: acknowledged with attempt %d, and leased with attempt %d", k.msg, k.recipient, as[0], top)
		}
		if a, ok := lg.nackDead[k]; ok && a != top {
			r.violate(&r.duplicated, "message %s at %s: a dead letter by the Nack of attempt %d, and leased with attempt %d", k.msg, k.recipient, a, top)
		}
		e, ok := l.byMsg[k.msg][k.recipient]
		if !ok {
			r.violate(&r.lost, "ledger: message %s, leased by %s (attempts %v), has no entry for it", k.msg, k.recipient, lg.grants[k])
			continue
		}
		switch e.State {
		case exchange.LedgerLeased:
			if e.Attempts < top {
				r.violate(&r.lost, "ledger: message %s at %s is leased after %d attempts, and a client was handed attempt %d", k.msg, k.recipient, e.Attempts, top)
			}
		case exchange.LedgerAcked, exchange.LedgerPopped, exchange.LedgerReturned:
		case exchange.LedgerDead, exchange.LedgerEvicted:
			if e.Reason != exchange.ReasonMaxAttempts {
				r.violate(&r.lost, "ledger: message %s, leased by %s, is a dead letter for reason %d", k.msg, k.recipient, e.Reason)
			}
		default:
			r.violate(&r.lost, "ledger: message %s, leased by %s (attempts %v), is %s there", k.msg, k.recipient, lg.grants[k], e.State)
		}
		if _, ok := lg.nackDead[k]; ok && !maxAttemptsDead(e) && e.State != exchange.LedgerReturned {
			r.violate(&r.duplicated, "ledger: message %s at %s, which a Nack made a dead letter, is %s there", k.msg, k.recipient, e.State)
		}
	}
}

// compareExKeys orders ledger keys, for reports in a stable order.
func compareExKeys(a, b exKey) int {
	return cmp.Or(cmp.Compare(a.msg, b.msg), cmp.Compare(a.recipient, b.recipient))
}

// checkMessage checks the entries of one acknowledged Send. The caller holds the log's lock.
func (r *exRun) checkMessage(l *exLedger, id string, s *exSend) {
	lg := r.log
	entries := l.byMsg[id]
	if len(entries) == 0 {
		r.violate(&r.lost, "ledger: acknowledged Send %s (message %s from %s) has no entry", s.token, id, s.sender)
		return
	}
	if e, ok := entries[""]; ok {
		switch {
		case len(entries) > 1:
			r.violate(&r.duplicated, "ledger: message %s is in %s's outbox (%s) and routed too (%d entries)", id, s.sender, e.State, len(entries)-1)
		case lg.collects[id] != nil:
			r.violate(&r.duplicated, "ledger: message %s, which an acknowledged Collect routed, is still an outbox entry (%s)", id, e.State)
		case e.State == exchange.LedgerOutbox:
			if lg.returned[exKey{id, ""}] {
				r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned, is still queued", id, s.sender)
			}
		case e.State == exchange.LedgerReturned:
			if !lg.returned[exKey{id, ""}] && lg.unseenUnregisters[s.sender] == 0 {
				r.violate(&r.lost, "ledger: message %s returned from %s's outbox, and no Unregister of it returned it or was in flight", id, s.sender)
			}
			r.returnedUnseen += b2i(!lg.returned[exKey{id, ""}])
		default:
			r.violate(&r.lost, "ledger: message %s's outbox entry is %s", id, e.State)
		}
		return
	}
	if lg.returned[exKey{id, ""}] {
		r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned from the outbox, was routed", id, s.sender)
	}
	d := lg.collects[id]
	if d == nil {
		if lg.unseenCollects[s.sender] == 0 {
			r.violate(&r.lost, "ledger: message %s of %s was routed, and no Collect of it reported it or was in flight", id, s.sender)
		}
		r.routedUnseen++
	}
	reached := map[string]bool{}
	for _, o := range d.GetReachedOwnerIds() {
		reached[o] = true
		if e, ok := entries[o]; !ok {
			r.violate(&r.lost, "ledger: message %s reached %s (its Collect said), and has no entry for it", id, o)
		} else {
			r.checkDelivered(id, e)
		}
	}
	// With no report (a Collect in flight at a kill routed the message), a returned entry for one of
	// the owners is ambiguous: the message reached it and an Unregister of it returned it, or it
	// was a dead letter for it and an Unregister of the sender returned that.
	drops, returnedDead, ambiguous := 0, 0, []string(nil)
	for rc, e := range entries {
		if reached[rc] {
			continue
		}
		if d == nil {
			switch {
			case e.State == exchange.LedgerInbox || e.State == exchange.LedgerPopped ||
				e.State == exchange.LedgerLeased || e.State == exchange.LedgerAcked || maxAttemptsDead(e):
				r.checkDelivered(id, e) // reached rc
				continue
			case e.State == exchange.LedgerReturned && lg.returned[exKey{id, rc}]:
				continue // reached rc, whose Unregister returned it
			case e.State == exchange.LedgerReturned && slices.Contains(r.owners, rc):
				ambiguous = append(ambiguous, rc)
				continue
			}
		}
		drops++
		switch e.State {
		case exchange.LedgerDead, exchange.LedgerEvicted:
		case exchange.LedgerReturned:
			returnedDead++
		default:
			r.violate(&r.lost, "ledger: message %s's entry for %q, which no delivery reached, is %s", id, rc, e.State)
		}
	}
	if d != nil && drops != len(d.GetDrops()) {
		r.violate(&r.lost, "ledger: message %s has %d drop entries, its Collect reported %d drops (%d reached): %s", id, drops, len(d.GetDrops()), len(reached), describeEntries(entries))
	}
	// The dead letters Unregisters of the sender returned are returned entries; more are allowed
	// only if an Unregister of it was in flight at a kill.
	n := lg.returnedDead[id]
	switch {
	case n > returnedDead+len(ambiguous):
		r.violate(&r.lost, "ledger: message %s: %d dead letters returned by Unregister %s, and %d returned entries (%d that may be): %s",
			id, n, s.sender, returnedDead, len(ambiguous), describeEntries(entries))
	case returnedDead > n && lg.unseenUnregisters[s.sender] == 0:
		r.violate(&r.lost, "ledger: message %s: %d dead letters returned, and Unregisters of %s returned %d, none in flight: %s",
			id, returnedDead, s.sender, n, describeEntries(entries))
	}
	for _, rc := range ambiguous[:max(0, len(ambiguous)-max(0, n-returnedDead))] {
		if lg.unseenUnregisters[rc] == 0 && lg.unseenUnregisters[s.sender] == 0 {
			r.violate(&r.lost, "ledger: message %s returned for %s, and no Unregister of it or of %s returned it or was in flight: %s",
				id, rc, s.sender, describeEntries(entries))
		}
	}
}

// describeEntries lists a message's entries, for a violation's description.
func describeEntries(entries map[string]exchange.LedgerEntry) string {
	var out []string
	for _, rc := range slices.Sorted(maps.Keys(entries)) {
		e := entries[rc]
		out = append(out, fmt.Sprintf("%q %s (reason %d)", rc, e.State, e.Reason))
	}
	return strings.Join(out, ", ")
}

// checkDelivered checks an entry of a recipient a message reached: in its inbox (leased or not),
// popped, acked, a dead letter of the recipient for max attempts, or returned with it (popped,
// acked and leased entries are held to the clients' pops, Acks and leases in checkLedger). The
// caller holds the log's lock.
func (r *exRun) checkDelivered(id string, e exchange.LedgerEntry) {
	lg := r.log
	k := exKey{id, e.Recipient}
	switch e.State {
	case exchange.LedgerInbox:
		if lg.returned[k] {
			r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned, is still in its inbox", id, e.Recipient)
		}
		if as := lg.grants[k]; len(as) > 0 {
			r.violate(&r.lost, "ledger: message %s, leased by %s (attempts %v), is an inbox entry never leased", id, e.Recipient, as)
		}
	case exchange.LedgerLeased:
		if lg.returned[k] {
			r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned, is still leased in its inbox", id, e.Recipient)
		}
		if e.Attempts < 1 || e.Attempts > exCrashMaxAttempts {
			r.violate(&r.duplicated, "ledger: message %s is leased at %s after %d attempts, max_attempts is %d", id, e.Recipient, e.Attempts, exCrashMaxAttempts)
		}
	case exchange.LedgerDead, exchange.LedgerEvicted:
		switch {
		case e.Reason != exchange.ReasonMaxAttempts:
			r.violate(&r.lost, "ledger: message %s reached %s and is %s there, reason %d", id, e.Recipient, e.State, e.Reason)
		case e.Attempts != exCrashMaxAttempts:
			r.violate(&r.lost, "ledger: message %s is a dead letter of %s for max attempts after %d attempts, max_attempts is %d", id, e.Recipient, e.Attempts, exCrashMaxAttempts)
		case lg.returned[k]:
			r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned, is still its dead letter", id, e.Recipient)
		}
	case exchange.LedgerAcked, exchange.LedgerPopped:
	case exchange.LedgerReturned:
		if !lg.returned[k] {
			if lg.unseenUnregisters[e.Recipient] == 0 {
				r.violate(&r.lost, "ledger: message %s returned from %s's inbox, and no Unregister of it returned it or was in flight", id, e.Recipient)
			}
			r.returnedUnseen++
		}
	default:
		r.violate(&r.lost, "ledger: message %s reached %s and is %s there", id, e.Recipient, e.State)
	}
}

// checkUnknown, once the Sends in flight at the kill are resolved by their retries, reports every
// message in the ledger that no acknowledged Send made: a retried Send written twice, or mail
// from nowhere.
func (r *exRun) checkUnknown(l *exLedger) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(l.ids)) {
		if _, ok := r.log.sends[id]; !ok {
			var sender string
			for _, e := range l.byMsg[id] {
				sender = e.Sender.String()
			}
			r.violate(&r.duplicated, "ledger: message %s from %s, which no acknowledged Send made (a retry written twice?)", id, sender)
		}
	}
}

// checkServer holds the restarted server to the ledger the killed one left, before any call
// changes it: registered owners, their queued and inbox counts, Receive, ListDeadLetters. It
// returns the registered owners.
func (r *exRun) checkServer(ctx context.Context, c historyv1.ExchangeServiceClient, l *exLedger) map[string]bool {
	queued, inbox, dead := map[string]int{}, map[string]map[string]bool{}, map[string]int{}
	// sweepable: leased entries at max_attempts, which the restarted server may make dead letters
	// of as it answers (lease.go: an expired lease is noticed by the next call that reads the
	// owner's inboxes or dead letters).
	sweepable := map[string]map[string]bool{}
	for id, es := range l.byMsg {
		for rc, e := range es {
			switch e.State {
			case exchange.LedgerOutbox:
				queued[e.Sender.String()]++
			case exchange.LedgerInbox, exchange.LedgerLeased:
				if inbox[rc] == nil {
					inbox[rc] = map[string]bool{}
				}
				inbox[rc][id] = true
				if e.State == exchange.LedgerLeased && e.Attempts >= exCrashMaxAttempts {
					if sweepable[rc] == nil {
						sweepable[rc] = map[string]bool{}
					}
					sweepable[rc][id] = true
				}
			case exchange.LedgerDead:
				if e.Reason == exchange.ReasonMaxAttempts {
					dead[rc]++ // the recipient's dead letter
				} else {
					dead[e.Sender.String()]++
				}
			}
		}
	}
	registered := map[string]bool{}
	token := ""
	for {
		page, err := c.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			r.t.Fatalf("ListOwners after the restart: %v", err)
		}
		for _, o := range page.GetOwners() {
			id := o.GetOwnerId()
			registered[id] = true
			if int(o.GetQueuedCount()) != queued[id] {
				r.violate(&r.lost, "owner %s: queued_count %d after the restart, %d outbox entries in the ledger", id, o.GetQueuedCount(), queued[id])
			}
			if n := int(o.GetInboxCount()); n > len(inbox[id]) || n < len(inbox[id])-len(sweepable[id]) {
				r.violate(&r.lost, "owner %s: inbox_count %d after the restart, %d inbox and leased entries in the ledger (%d of them at max attempts)",
					id, o.GetInboxCount(), len(inbox[id]), len(sweepable[id]))
			}
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	for _, o := range r.owners {
		got := r.receiveAll(ctx, c, o)
		for id := range inbox[o] {
			if !got[id] && !sweepable[o][id] {
				r.violate(&r.lost, "owner %s: message %s is in its inbox in the ledger, and Receive after the restart does not return it", o, id)
			}
		}
		for id := range got {
			if !inbox[o][id] {
				r.violate(&r.duplicated, "owner %s: Receive after the restart returns message %s, which is not an inbox entry in the ledger", o, id)
			}
		}
		if !registered[o] {
			if queued[o] > 0 || len(inbox[o]) > 0 {
				r.violate(&r.lost, "owner %s is not registered after the restart, and the ledger holds %d outbox and %d inbox entries for it", o, queued[o], len(inbox[o]))
			}
			continue
		}
		if n := r.deadLetters(ctx, c, o); n < dead[o] || n > dead[o]+len(sweepable[o]) {
			r.violate(&r.lost, "owner %s: ListDeadLetters after the restart lists %d, the ledger has %d dead entries (and %d leased at max attempts)", o, n, dead[o], len(sweepable[o]))
		}
	}
	return registered
}

// receiveAll returns the ids of every message in owner's inboxes, paging to the end.
func (r *exRun) receiveAll(ctx context.Context, c historyv1.ExchangeServiceClient, owner string) map[string]bool {
	got := map[string]bool{}
	token := ""
	for {
		page, err := c.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: owner, PageSize: 1000, PageToken: token, OmitRendered: true})
		if err != nil {
			r.t.Fatalf("Receive %s after the restart: %v", owner, err)
		}
		for _, m := range page.GetMessages() {
			if got[m.GetId()] {
				r.violate(&r.duplicated, "owner %s: Receive after the restart returns message %s twice", owner, m.GetId())
			}
			got[m.GetId()] = true
		}
		if token = page.GetNextPageToken(); token == "" {
			return got
		}
	}
}

// deadLetters counts owner's dead letters, paging to the end.
func (r *exRun) deadLetters(ctx context.Context, c historyv1.ExchangeServiceClient, owner string) int {
	n := 0
	token := ""
	for {
		page, err := c.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: owner, PageSize: 1000, PageToken: token, OmitRendered: true})
		if err != nil {
			r.t.Fatalf("ListDeadLetters %s after the restart: %v", owner, err)
		}
		n += len(page.GetDeadLetters())
		if token = page.GetNextPageToken(); token == "" {
			return n
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unseen counts, per recipient, the ledger's entries in state that no client saw (seen reports
// false for their key): pops or Acks that were in flight at a kill, or a loss.
func (l *exLedger) unseen(state exchange.LedgerState, seen func(exKey) bool) map[string]int {
	out := map[string]int{}
	for id, byRcpt := range l.byMsg {
		for rc, e := range byRcpt {
			if e.State == state && !seen(exKey{id, rc}) {
				out[rc]++
			}
		}
	}
	return out
}
