package exchangetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// ledgerOf returns the engine's ledger grouped by message id, or skips the case when the engine
// keeps none (the memory engine: issue 17 keeps the ledger in the database engines' tables).
func ledgerOf(t *testing.T, svc exchange.Service) map[uuid.UUID][]exchange.LedgerEntry {
	t.Helper()
	l, ok := svc.(exchange.Ledgered)
	if !ok {
		t.Skip("the engine keeps no ledger (it does not implement exchange.Ledgered)")
	}
	entries, err := l.Ledger(ctx(t))
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	out := map[uuid.UUID][]exchange.LedgerEntry{}
	for _, e := range entries {
		out[e.Message] = append(out[e.Message], e)
	}
	return out
}

// ledgerWant is what one message's single ledger entry must say; an empty recipient or a zero
// reason is not checked where the ledger's documentation leaves it open (a returned dead letter).
type ledgerWant struct {
	msg       *envelope.Message
	recipient string
	state     exchange.LedgerState
	reason    exchange.Reason
	anyRcpt   bool
}

// testLedger: each delivery of an acknowledged Send is in exactly one state, one entry per
// (message, recipient), and moves outbox -> inbox -> popped, dead -> evicted, and to returned when
// Unregister hands it back (issue 17, conservation; exchange.LedgerState). It runs when the engine
// implements exchange.Ledgered.
func testLedger(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxDeadLetters: 1}, ownerA, ownerB)
	ledgerOf(t, x.svc) // skips before any work on an engine without a ledger
	popped := x.send(ownerA, to(ownerB), "popped")
	held := x.send(ownerA, to(ownerB), "held")
	x.collect(ownerA)
	x.pop(ownerB, ownerA)
	evicted := x.send(ownerA, envelope.ParseParticipant("bob"), "evicted")
	dead := x.send(ownerA, to(ownerD), "dead")
	x.collect(ownerA)
	queued := x.send(ownerA, to(ownerB), "queued")
	bcast := x.send(ownerB, envelope.None(), "to A")
	x.collect(ownerB)

	check := func(step string, wants []ledgerWant) {
		t.Helper()
		got := ledgerOf(t, x.svc)
		if len(got) != len(wants) {
			t.Errorf("%s: ledger holds %d messages, want %d", step, len(got), len(wants))
		}
		for _, w := range wants {
			es := got[w.msg.ID]
			if len(es) != 1 {
				t.Errorf("%s: %q has %d ledger entries %+v, want exactly one", step, content(w.msg), len(es), es)
				continue
			}
			e := es[0]
			sender, _ := w.msg.Sender.ID()
			if e.Sender != sender || e.State != w.state || (!w.anyRcpt && e.Recipient != w.recipient) || (w.reason != 0 && e.Reason != w.reason) {
				t.Errorf("%s: %q is %+v, want %s for %q (reason %v) from %s", step, content(w.msg), e, w.state, w.recipient, w.reason, sender)
			}
		}
	}
	check("before Unregister", []ledgerWant{
		{msg: popped, recipient: ownerB.String(), state: exchange.LedgerPopped},
		{msg: held, recipient: ownerB.String(), state: exchange.LedgerInbox},
		{msg: evicted, recipient: "bob", state: exchange.LedgerEvicted, reason: exchange.ReasonNotUUID},
		{msg: dead, recipient: ownerD.String(), state: exchange.LedgerDead, reason: exchange.ReasonUnknownRecipient},
		{msg: queued, recipient: "", state: exchange.LedgerOutbox},
		{msg: bcast, recipient: ownerA.String(), state: exchange.LedgerInbox},
	})
	x.unregister(ownerA)
	check("after A left", []ledgerWant{
		{msg: popped, recipient: ownerB.String(), state: exchange.LedgerPopped},
		{msg: held, recipient: ownerB.String(), state: exchange.LedgerInbox},
		{msg: evicted, recipient: "bob", state: exchange.LedgerEvicted, reason: exchange.ReasonNotUUID},
		{msg: dead, state: exchange.LedgerReturned, anyRcpt: true},
		{msg: queued, recipient: "", state: exchange.LedgerReturned},
		{msg: bcast, recipient: ownerA.String(), state: exchange.LedgerReturned},
	})
}
