//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// The checker of TestExchangeReplicas: the ledger (one entry per (message, recipient), issue 17)
// compared both ways with what the clients were answered. A delivery the clients were told of
// (an acknowledged Send, a report's reached owner or drop) with no entry, or an entry in a state no
// client saw (in the inbox but not received, popped by no PopMessage, returned by no Unregister, a
// dead letter the sender's list does not hold) is lost; a request id answered with two messages,
// a message routed twice, an entry no report made, a message popped twice or popped and still in
// the inbox, is duplicated. Leases (issue 18): a message acknowledged twice, an attempt handed out
// twice, an Ack or Nack refused as stale (no lease expires in the test: another leaser held the
// message), or an acknowledged message in any state but acked, is duplicated; a lease, an Ack or
// a Nack whose effect the ledger lacks is lost.

// xrCounts are the printed line's numbers, and every difference found.
type xrCounts struct {
	sent, delivered, deadLettered, evicted int
	leased, acked, nacked, maxDead         int // leases handed out, messages acknowledged once, Nacks, max-attempts dead letters
	lost, duplicated                       int
	violations                             []string
}

func (c *xrCounts) violate(n *int, format string, args ...any) {
	*n++
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// reasonOfProto maps the wire's dead-letter reasons to the ledger's.
var reasonOfProto = map[historyv1.DeadLetterReason]exchange.Reason{
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNSET_RECIPIENT:   exchange.ReasonUnsetRecipient,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNKNOWN_RECIPIENT: exchange.ReasonUnknownRecipient,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_NOT_A_UUID:        exchange.ReasonNotUUID,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_RECIPIENT_LEFT:    exchange.ReasonRecipientLeft,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_INBOX_FULL:        exchange.ReasonInboxFull,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_NO_RECIPIENTS:     exchange.ReasonNoRecipients,
	historyv1.DeadLetterReason_DEAD_LETTER_REASON_MAX_ATTEMPTS:      exchange.ReasonMaxAttempts,
}

// ledgerHolder is the owner whose dead letter e is: the recipient's for max attempts (issue 18),
// else the sender's.
func ledgerHolder(e exchange.LedgerEntry) uuid.UUID {
	if e.Reason == exchange.ReasonMaxAttempts {
		if id, err := uuid.Parse(e.Recipient); err == nil {
			return id
		}
	}
	return e.Sender
}

// checkLeases holds the leases, Acks and Nacks the leasers were answered to each other and to the
// ledger (issue 18). The caller holds r.mu.
func (r *xrRun) checkLeases(c *xrCounts, ledger map[xrKey]exchange.LedgerEntry) {
	for _, s := range r.stale {
		c.violate(&c.duplicated, "%s: a lease no deadline ended was no longer held, so another leaser held the message at the same time", s)
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.grants), func(a, b xrKey) int {
		return cmp.Or(cmp.Compare(a.msg, b.msg), cmp.Compare(a.rcpt, b.rcpt))
	}) {
		gs := r.grants[k]
		c.leased += len(gs)
		// No lease expires: each message's leases are attempts 1, 2, ... each handed out once, each
		// but the last nacked before the next.
		attempts := make([]int, len(gs))
		for i, g := range gs {
			attempts[i] = g.attempt
		}
		slices.Sort(attempts)
		for i, a := range attempts {
			if a != i+1 {
				c.violate(&c.duplicated, "message %s at %s: leases of attempts %v (on %v), want 1 to %d each once", k.msg, k.rcpt, attempts, gs, len(gs))
				break
			}
		}
		if n := len(r.nacks[k]); n != len(gs)-1 && n != len(gs) {
			c.violate(&c.duplicated, "message %s at %s: %d leases, %d nacked: a lease was taken while another was held", k.msg, k.rcpt, len(gs), n)
		}
		e := ledger[k]
		switch as := r.acks[k]; {
		case len(as) > 1:
			c.violate(&c.duplicated, "message %s at %s: acknowledged %d times (attempts %v)", k.msg, k.rcpt, len(as), as)
		case len(as) == 1:
			c.acked++
			if as[0] != len(gs) {
				c.violate(&c.duplicated, "message %s at %s: acknowledged with attempt %d of %d leases", k.msg, k.rcpt, as[0], len(gs))
			}
			if e.State != exchange.LedgerAcked {
				c.violate(&c.duplicated, "message %s at %s: acknowledged, and the ledger says %q: it can be handed out again", k.msg, k.rcpt, e.State)
			}
		}
		c.nacked += len(r.nacks[k])
		if a, ok := r.nackDead[k]; ok {
			if a != xrMaxAttempts || a != len(gs) {
				c.violate(&c.duplicated, "message %s at %s: a dead letter by the Nack of attempt %d (of %d leases), max_attempts %d", k.msg, k.rcpt, a, len(gs), xrMaxAttempts)
			}
			if (e.State != exchange.LedgerDead && e.State != exchange.LedgerEvicted) || e.Reason != exchange.ReasonMaxAttempts || e.Attempts != a {
				c.violate(&c.lost, "message %s at %s: a Nack made it a dead letter after %d attempts, the ledger says %q (%v) after %d", k.msg, k.rcpt, a, e.State, e.Reason, e.Attempts)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.acks), func(a, b xrKey) int {
		return cmp.Or(cmp.Compare(a.msg, b.msg), cmp.Compare(a.rcpt, b.rcpt))
	}) {
		if len(r.grants[k]) == 0 {
			c.violate(&c.duplicated, "message %s at %s: acknowledged, and never leased", k.msg, k.rcpt)
		}
	}
	for k, e := range ledger {
		if (e.State == exchange.LedgerDead || e.State == exchange.LedgerEvicted) && e.Reason == exchange.ReasonMaxAttempts {
			if _, ok := r.nackDead[k]; !ok {
				c.violate(&c.lost, "message %s at %s: a max-attempts dead letter in the ledger (%d attempts), and no Nack made it one", k.msg, k.rcpt, e.Attempts)
			}
		}
	}
}

// check compares the ledger with the run's record and the live owners' final state, and what the
// stream on B delivered with what the reports say reached its owner.
func (r *xrRun) check(entries []exchange.LedgerEntry) xrCounts {
	final, o, seen, want := r.final, r.owners, r.seen, r.want
	r.mu.Lock()
	defer r.mu.Unlock()
	var c xrCounts
	c.sent = len(r.sent)

	ledger := map[xrKey]exchange.LedgerEntry{}
	byMsg := map[string][]xrKey{}
	evictedBy := map[uuid.UUID]uint64{}
	for _, e := range entries {
		k := xrKey{e.Message.String(), e.Recipient}
		if prev, ok := ledger[k]; ok {
			c.violate(&c.duplicated, "ledger: (message %s, recipient %q) twice, %s and %s", k.msg, k.rcpt, prev.State, e.State)
			continue
		}
		ledger[k] = e
		byMsg[k.msg] = append(byMsg[k.msg], k)
		if e.State == exchange.LedgerEvicted {
			c.evicted++
			evictedBy[ledgerHolder(e)]++
		}
		if (e.State == exchange.LedgerDead || e.State == exchange.LedgerEvicted) && e.Reason == exchange.ReasonMaxAttempts {
			c.maxDead++
		}
	}

	// Each request id wrote once, whichever replica and however often it was sent.
	for _, rid := range slices.Sorted(maps.Keys(r.ridMsgs)) {
		if ids := r.ridMsgs[rid]; len(ids) > 1 {
			c.violate(&c.duplicated, "request id %s answered with %d messages %v: written more than once", rid, len(ids), slices.Sorted(maps.Keys(ids)))
		}
	}

	// Each acknowledged Send: routed by one report, whose every reached owner and drop has its
	// entry (in a state that follows from it), and no other entry; or never collected, and
	// returned in its sender's Flow.
	for _, id := range slices.Sorted(maps.Keys(r.sent)) {
		s := r.sent[id]
		keys := byMsg[id]
		if len(keys) == 0 {
			c.violate(&c.lost, "message %s (request %s of %s): acknowledged, and not in the ledger", id, s.rid, s.sender)
			continue
		}
		if e, ok := ledger[xrKey{id, ""}]; ok && e.Sender != s.sender {
			c.violate(&c.lost, "message %s: sent by %s, the ledger says by %s", id, s.sender, e.Sender)
		}
		ds := r.collected[id]
		expected := map[xrKey]bool{}
		switch len(ds) {
		case 0:
			k := xrKey{id, ""}
			expected[k] = true
			if e, ok := ledger[k]; !ok || e.State != exchange.LedgerReturned || !r.returned[k] {
				c.violate(&c.lost, "message %s (request %s): never collected, and not returned by its sender's Unregister (ledger %+v, returned %v)", id, s.rid, ledger[k], r.returned[k])
			}
		default:
			if len(ds) > 1 {
				c.violate(&c.duplicated, "message %s: routed by %d collect reports", id, len(ds))
			}
			d := ds[0]
			for _, o := range d.reached {
				k := xrKey{id, o}
				if expected[k] {
					c.violate(&c.duplicated, "message %s: reached %s twice in one report", id, o)
				}
				expected[k] = true
				c.delivered++
				switch e, ok := ledger[k]; {
				case !ok:
					c.violate(&c.lost, "message %s: reported reaching %s, no ledger entry", id, o)
				case e.State != exchange.LedgerInbox && e.State != exchange.LedgerPopped && e.State != exchange.LedgerReturned &&
					e.State != exchange.LedgerLeased && e.State != exchange.LedgerAcked && e.Reason != exchange.ReasonMaxAttempts:
					c.violate(&c.lost, "message %s: reported reaching %s, the ledger says %s (%v)", id, o, e.State, e.Reason)
				}
			}
			for _, dr := range d.drops {
				k := xrKey{id, dr.rcpt}
				expected[k] = true
				c.deadLettered++
				switch e, ok := ledger[k]; {
				case !ok:
					c.violate(&c.lost, "message %s: reported dropped for %s (%v), no ledger entry", id, dr.rcpt, dr.reason)
				case e.State != exchange.LedgerDead && e.State != exchange.LedgerEvicted && e.State != exchange.LedgerReturned:
					c.violate(&c.duplicated, "message %s: reported dropped for %s (%v), the ledger says %s", id, dr.rcpt, dr.reason, e.State)
				case e.Reason != reasonOfProto[dr.reason]:
					c.violate(&c.lost, "message %s: reported dropped for %s as %v, the ledger's reason is %v", id, dr.rcpt, dr.reason, e.Reason)
				}
			}
		}
		for _, k := range keys {
			if !expected[k] {
				c.violate(&c.duplicated, "message %s: ledger entry for %q (%s) that no report made", id, k.rcpt, ledger[k].State)
			}
		}
	}

	// Each entry's state is what the clients saw.
	for _, k := range slices.SortedFunc(maps.Keys(ledger), func(a, b xrKey) int {
		return cmp.Or(cmp.Compare(a.msg, b.msg), cmp.Compare(a.rcpt, b.rcpt))
	}) {
		e := ledger[k]
		if _, ok := r.sent[k.msg]; !ok {
			c.violate(&c.duplicated, "ledger entry %+v: no acknowledged Send made its message", e)
			continue
		}
		switch e.State {
		case exchange.LedgerOutbox:
			c.violate(&c.lost, "message %s: still in %s's outbox after the final CollectAll", k.msg, e.Sender)
		case exchange.LedgerInbox:
			if !final.inbox[k] {
				c.violate(&c.lost, "message %s: in %s's inbox in the ledger, and Receive on B does not show it", k.msg, k.rcpt)
			}
			if len(r.grants[k]) > 0 {
				c.violate(&c.lost, "message %s: leased by %s (%v), the ledger says never leased", k.msg, k.rcpt, r.grants[k])
			}
		case exchange.LedgerLeased:
			if !final.inbox[k] {
				c.violate(&c.lost, "message %s: leased in %s's inbox in the ledger, and Receive on B does not show it", k.msg, k.rcpt)
			}
			if e.Attempts != len(r.grants[k]) {
				c.violate(&c.lost, "message %s: leased %d times at %s in the ledger, the leasers were handed %d leases", k.msg, e.Attempts, k.rcpt, len(r.grants[k]))
			}
		case exchange.LedgerAcked:
			if as := r.acks[k]; len(as) == 0 || e.Attempts != as[0] {
				c.violate(&c.lost, "message %s: acked at %s after %d attempts in the ledger, the Acks that succeeded were of attempts %v", k.msg, k.rcpt, e.Attempts, as)
			}
		case exchange.LedgerPopped:
			if len(r.pops[k]) == 0 {
				c.violate(&c.lost, "message %s: popped for %s in the ledger, and no PopMessage returned it", k.msg, k.rcpt)
			}
		case exchange.LedgerReturned:
			if !r.returned[k] {
				c.violate(&c.lost, "message %s: returned (%q) in the ledger, and no Unregister's Flow held it", k.msg, k.rcpt)
			}
		case exchange.LedgerDead:
			if reason, ok := final.dead[k]; !ok || reasonOfProto[reason] != e.Reason {
				c.violate(&c.lost, "message %s: a dead letter (%q, %v) of %s in the ledger; ListDeadLetters on B shows %v", k.msg, k.rcpt, e.Reason, e.Sender, reason)
			}
		case exchange.LedgerEvicted:
		default:
			c.violate(&c.lost, "message %s (%q): unknown ledger state %q", k.msg, k.rcpt, e.State)
		}
	}

	// And the other way: what the clients were handed is where the ledger says.
	for k, reps := range r.pops {
		if len(reps) > 1 {
			c.violate(&c.duplicated, "message %s: popped for %s %d times (on %v)", k.msg, k.rcpt, len(reps), reps)
		}
		if e := ledger[k]; e.State != exchange.LedgerPopped {
			c.violate(&c.duplicated, "message %s: popped for %s on %v, and the ledger says %q", k.msg, k.rcpt, reps, e.State)
		}
	}
	for k := range final.inbox {
		if e := ledger[k]; e.State != exchange.LedgerInbox && e.State != exchange.LedgerLeased {
			c.violate(&c.duplicated, "message %s: Receive on B shows it in %s's inbox, the ledger says %q", k.msg, k.rcpt, e.State)
		}
	}
	r.checkLeases(&c, ledger)
	for k := range r.returned {
		if e := ledger[k]; e.State != exchange.LedgerReturned {
			c.violate(&c.duplicated, "message %s (%q): returned by Unregister, the ledger says %q", k.msg, k.rcpt, e.State)
		}
	}
	for k := range final.dead {
		if e := ledger[k]; e.State != exchange.LedgerDead {
			c.violate(&c.duplicated, "message %s (%q): listed as a dead letter, the ledger says %q", k.msg, k.rcpt, e.State)
		}
	}
	for _, s := range o.all() {
		if got, want := evictedBy[s], final.evicted[s]+r.evicted[s]; got != want {
			c.violate(&c.lost, "owner %s: %d evicted entries in the ledger, the clients were told %d", s, got, want)
		}
	}
	if final.queued != 0 {
		c.violate(&c.lost, "ListOwners on B: %d messages queued after the final CollectAll", final.queued)
	}

	// SubscribeInbox on B saw each delivery collected on A to its owner, once.
	got := map[string]int{}
	for _, id := range seen {
		got[id]++
		if got[id] == 2 {
			c.violate(&c.duplicated, "SubscribeInbox on B: message %s streamed more than once", id)
		}
		if !want[id] {
			c.violate(&c.duplicated, "SubscribeInbox on B: message %s streamed, and no report says it reached the owner", id)
		}
	}
	for id := range want {
		if got[id] == 0 {
			c.violate(&c.lost, "SubscribeInbox on B: message %s reached the owner (collected on A) and was not streamed within %v", id, xrStreamWait)
		}
	}
	return c
}
