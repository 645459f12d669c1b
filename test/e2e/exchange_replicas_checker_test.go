//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// TestExchangeReplicasChecker proves TestExchangeReplicas's checker can fail (preamble: "no test
// that cannot fail"). It runs the same traffic against one memory server (A and B the same
// process: the memory engine keeps no ledger), builds the ledger that the clients' answers imply,
// and checks that the checker finds it clean; then it loses an entry, moves one to another state,
// hands a message out twice, and (issue 18) puts an acknowledged message back in its inbox and
// hands one attempt of a lease out twice, and checks that each is counted.
func TestExchangeReplicasChecker(t *testing.T) {
	noLeaks(t)
	p := startServer(t, "--exchange-max-inbox", "5", "--exchange-max-dead-letters", "10")
	ctx, cancel := context.WithTimeout(context.Background(), 4*startTimeout)
	defer cancel()
	r := driveExchangeReplicas(ctx, t, p, p)
	ledger := r.impliedLedger()
	c := r.check(ledger)
	for _, v := range c.violations[:min(len(c.violations), xrDescribeMost)] {
		t.Error(v)
	}
	if c.lost+c.duplicated != 0 || c.delivered == 0 || c.deadLettered == 0 || c.evicted == 0 || c.acked == 0 {
		t.Fatalf("the implied ledger: %+v; want 0 lost, 0 duplicated, and deliveries, dead letters, evictions and Acks", c)
	}
	t.Logf("implied ledger: %d entries, %d sent, %d delivered, %d dead-lettered, %d evicted", len(ledger), c.sent, c.delivered, c.deadLettered, c.evicted)

	pick := func(state exchange.LedgerState) int {
		for i, e := range ledger {
			if e.State == state {
				return i
			}
		}
		t.Fatalf("the implied ledger has no %s entry", state)
		return 0
	}
	for _, m := range []struct {
		name   string
		mutate func([]exchange.LedgerEntry) []exchange.LedgerEntry
		lost   bool // counted lost (else duplicated)
	}{
		{"an inbox entry missing", func(l []exchange.LedgerEntry) []exchange.LedgerEntry {
			i := pick(exchange.LedgerInbox)
			return append(l[:i:i], l[i+1:]...)
		}, true},
		{"a popped entry back in the inbox", func(l []exchange.LedgerEntry) []exchange.LedgerEntry {
			l[pick(exchange.LedgerPopped)].State = exchange.LedgerInbox
			return l
		}, false},
		{"a dead letter evicted uncounted", func(l []exchange.LedgerEntry) []exchange.LedgerEntry {
			l[pick(exchange.LedgerDead)].State = exchange.LedgerEvicted
			return l
		}, true},
		{"an entry for a recipient no report names", func(l []exchange.LedgerEntry) []exchange.LedgerEntry {
			e := l[pick(exchange.LedgerInbox)]
			e.Recipient = uuid.NewString()
			return append(l, e)
		}, false},
		{"an acknowledged message leased again", func(l []exchange.LedgerEntry) []exchange.LedgerEntry {
			l[pick(exchange.LedgerAcked)].State = exchange.LedgerLeased
			return l
		}, false},
	} {
		got := r.check(m.mutate(append([]exchange.LedgerEntry(nil), ledger...)))
		if (m.lost && got.lost == 0) || (!m.lost && got.duplicated == 0) {
			t.Errorf("%s: %d lost, %d duplicated; the checker missed it: %v", m.name, got.lost, got.duplicated, got.violations)
		}
	}
	r.pops[xrKey{"twice", r.owners.receivers[0].String()}] = []string{"A", "B"}
	if got := r.check(ledger); got.duplicated == 0 {
		t.Errorf("a message popped on A and on B: %d duplicated; the checker missed it", got.duplicated)
	}
	delete(r.pops, xrKey{"twice", r.owners.receivers[0].String()})
	for k, gs := range r.grants {
		r.grants[k] = append(gs, xrGrant{attempt: gs[0].attempt, rep: "B"})
		break
	}
	if got := r.check(ledger); got.duplicated == 0 {
		t.Errorf("an attempt of a lease handed out twice: %d duplicated; the checker missed it", got.duplicated)
	}
	stopReplicas(t, p)
}

// impliedLedger is the ledger the clients' answers imply: every report's reached owners and drops,
// each in the state the clients last saw it in; a message no report routed, returned with its
// sender's Flow.
func (r *xrRun) impliedLedger() []exchange.LedgerEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exchange.LedgerEntry
	for id, s := range r.sent {
		msg := uuid.MustParse(id)
		ds := r.collected[id]
		if len(ds) == 0 {
			out = append(out, exchange.LedgerEntry{Message: msg, Sender: s.sender, State: exchange.LedgerReturned})
			continue
		}
		for _, o := range ds[0].reached {
			k := xrKey{id, o}
			e := exchange.LedgerEntry{Message: msg, Sender: s.sender, Recipient: o, State: exchange.LedgerInbox, Attempts: len(r.grants[k])}
			switch a, dead := r.nackDead[k]; {
			case len(r.pops[k]) > 0:
				e.State = exchange.LedgerPopped
			case r.returned[k]:
				e.State = exchange.LedgerReturned
			case len(r.acks[k]) > 0:
				e.State = exchange.LedgerAcked
			case dead:
				e.State, e.Reason, e.Attempts = exchange.LedgerEvicted, exchange.ReasonMaxAttempts, a
				if r.final.dead[k] != 0 {
					e.State = exchange.LedgerDead
				}
			case len(r.grants[k]) > 0:
				e.State = exchange.LedgerLeased
			}
			out = append(out, e)
		}
		for _, d := range ds[0].drops {
			k := xrKey{id, d.rcpt}
			state := exchange.LedgerEvicted
			switch {
			case r.returned[k]:
				state = exchange.LedgerReturned
			case r.final.dead[k] != 0:
				state = exchange.LedgerDead
			}
			out = append(out, exchange.LedgerEntry{Message: msg, Sender: s.sender, Recipient: d.rcpt, State: state, Reason: reasonOfProto[d.reason]})
		}
	}
	return out
}
