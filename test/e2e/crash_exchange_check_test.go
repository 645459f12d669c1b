//go:build e2e

package e2e

import (
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
//     outbox entries are each owner's queued_count; the dead entries its ListDeadLetters.
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
	}
	return l
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
	unseen := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(l.byMsg)) {
		for rc, e := range l.byMsg[id] {
			if e.State == exchange.LedgerPopped && lg.pops[exKey{id, rc}] == 0 {
				unseen[rc]++
			}
		}
	}
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
			case e.State == exchange.LedgerInbox || e.State == exchange.LedgerPopped:
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

// checkDelivered checks an entry of a recipient a message reached: in its inbox, popped or
// returned with it (popped entries are held to the clients' pops in checkLedger). The caller holds
// the log's lock.
func (r *exRun) checkDelivered(id string, e exchange.LedgerEntry) {
	lg := r.log
	k := exKey{id, e.Recipient}
	switch e.State {
	case exchange.LedgerInbox:
		if lg.returned[k] {
			r.violate(&r.duplicated, "ledger: message %s, which Unregister %s returned, is still in its inbox", id, e.Recipient)
		}
	case exchange.LedgerPopped:
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
	for id, es := range l.byMsg {
		for rc, e := range es {
			switch e.State {
			case exchange.LedgerOutbox:
				queued[e.Sender.String()]++
			case exchange.LedgerInbox:
				if inbox[rc] == nil {
					inbox[rc] = map[string]bool{}
				}
				inbox[rc][id] = true
			case exchange.LedgerDead:
				dead[e.Sender.String()]++
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
			if int(o.GetInboxCount()) != len(inbox[id]) {
				r.violate(&r.lost, "owner %s: inbox_count %d after the restart, %d inbox entries in the ledger", id, o.GetInboxCount(), len(inbox[id]))
			}
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	for _, o := range r.owners {
		got := r.receiveAll(ctx, c, o)
		for id := range inbox[o] {
			if !got[id] {
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
		if n := r.deadLetters(ctx, c, o); n != dead[o] {
			r.violate(&r.lost, "owner %s: ListDeadLetters after the restart lists %d, the ledger has %d dead entries", o, n, dead[o])
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
