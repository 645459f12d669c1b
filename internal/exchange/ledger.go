package exchange

import (
	"context"

	"github.com/google/uuid"
)

// LedgerState is where one delivery of an acknowledged Send is (issue 17, conservation): at any
// moment, and after any crash, each (message, recipient) is in exactly one of these states.
type LedgerState string

// The ledger states. Outbox is the message before Collect has routed it (one entry per message,
// Recipient empty); Collect replaces it with one entry per recipient it considered: Inbox for each
// owner reached, Dead for each drop. The others are where those entries go next.
const (
	// LedgerOutbox: queued in the sender's outbox, not yet collected.
	LedgerOutbox LedgerState = "outbox"
	// LedgerInbox: in the recipient's inbox (Receive shows it).
	LedgerInbox LedgerState = "inbox"
	// LedgerLeased: in the recipient's inbox, leased at least once and not acknowledged (issue 18):
	// held by a lease, hidden by a Nack's delay, or visible again after its lease expired.
	LedgerLeased LedgerState = "leased"
	// LedgerAcked: removed by exactly one Ack of its lease.
	LedgerAcked LedgerState = "acked"
	// LedgerPopped: handed out by exactly one PopMessage.
	LedgerPopped LedgerState = "popped"
	// LedgerReturned: returned by Unregister, in the response of the owner that held it (the
	// sender for an outbox entry or a dead letter, the recipient for an inbox entry).
	LedgerReturned LedgerState = "returned"
	// LedgerDead: a dead letter, with its Reason: the sender's for Collect's drops, the
	// recipient's for ReasonMaxAttempts (Recipient is then the owner that leased it).
	LedgerDead LedgerState = "dead"
	// LedgerEvicted: a dead letter the per-owner bound evicted, and counted.
	LedgerEvicted LedgerState = "evicted"
)

// LedgerEntry is one (message, recipient) of the ledger.
type LedgerEntry struct {
	// Message is the message id; Sender the owner that sent it.
	Message, Sender uuid.UUID
	// Recipient is the owner reached for an inbox, popped or returned inbox entry; for a dead or
	// evicted entry, who the message was for in the words of DeadLetter.Recipient (a UUID, a role
	// or plain string, "unset", "None" for a broadcast that found no one); empty for an outbox
	// entry and for an outbox entry returned by Unregister.
	Recipient string
	// State is where the entry is.
	State LedgerState
	// Reason is why a Dead or Evicted entry was dropped; zero otherwise.
	Reason Reason
	// Attempts is the number of leases the delivery had (Leased, Acked, and Dead or Evicted for
	// ReasonMaxAttempts; an entry returned or popped after leases may keep its count).
	Attempts int
}

// Ledgered is implemented by the engines that keep the ledger (sqlite and postgres): tests and the
// crash checker read it to prove that no acknowledged Send was lost or handed out twice. The
// engines keep entries in a terminal state (popped, acked, returned, evicted) for a retention period
// (their option), then forget them.
type Ledgered interface {
	// Ledger returns every entry the engine keeps, in no particular order.
	Ledger(ctx context.Context) ([]LedgerEntry, error)
}
