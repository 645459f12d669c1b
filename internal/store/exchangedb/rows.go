package exchangedb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

// The ledger states as stored.
const (
	stOutbox   = string(exchange.LedgerOutbox)
	stInbox    = string(exchange.LedgerInbox)
	stPopped   = string(exchange.LedgerPopped)
	stAcked    = string(exchange.LedgerAcked)
	stReturned = string(exchange.LedgerReturned)
	stDead     = string(exchange.LedgerDead)
	stEvicted  = string(exchange.LedgerEvicted)
)

// noneKey is the ledger's recipient for None (a broadcast that found no one): "" is the outbox row.
const noneKey = "None"

// recipientKey is the ledger's recipient column for a drop's recipient. A plain string holding
// U+0000 (a message queued before Send refused such recipients, docs/decisions/0012 row 24) is
// kept with U+FFFD in place of each NUL: PostgreSQL's TEXT cannot hold NUL, and the collect that
// wrote it raw failed for ever (SQLSTATE 22021), leaving the sender's outbox blocked. The key
// only has to name the dead row, a direct message's one drop, since recipientOf reads such a
// recipient back from the message.
func recipientKey(p envelope.Participant) string {
	if p.IsNone() {
		return noneKey
	}
	return strings.ReplaceAll(p.String(), "\x00", "\uFFFD")
}

// recipientOf reads a dead row of message m back: None only for the no-recipients drop (a direct
// message to the plain string "None" keeps its name); a direct message whose recipient is not an
// owner's id (UNSET, a role, a plain string) was dropped for that recipient, m's own, which is
// read from m exactly as the memory engine reports it (recipientKey may have replaced a NUL).
func recipientOf(key string, reason exchange.Reason, m *envelope.Message) envelope.Participant {
	if reason == exchange.ReasonNoRecipients {
		return envelope.None()
	}
	if _, isID := m.Recipient.ID(); !isID && !m.IsBroadcast() {
		return m.Recipient
	}
	return envelope.ParseParticipant(key)
}

// participantText stores a participant with None told apart from every string (request records).
func participantText(p envelope.Participant) string {
	if p.IsNone() {
		return "N"
	}
	return "S" + p.String()
}

func participantFromText(s string) envelope.Participant {
	if s == "" || s[0] == 'N' {
		return envelope.None()
	}
	return envelope.ParseParticipant(s[1:])
}

func encodeMessage(m *envelope.Message) (string, error) {
	b, err := m.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("exchangedb: encode message %s: %w", m.ID, err)
	}
	return string(b), nil
}

// damagedError is a stored value the Exchange wrote and cannot read back (a damaged database, or
// rows written by something else). It is store.ErrStorageDamaged, which the server answers with
// DATA_LOSS as for history's damaged rows (postgres' damagedRowError): not INTERNAL, and not
// UNAVAILABLE either, since a retry cannot mend it (review R10).
type damagedError struct{ err error }

func (e damagedError) Error() string   { return e.err.Error() }
func (e damagedError) Unwrap() []error { return []error{e.err, store.ErrStorageDamaged} }

// damaged wraps a stored value's decoding error as damagedError.
func damaged(format string, args ...any) error { return damagedError{fmt.Errorf(format, args...)} }

func decodeMessage(body string) (*envelope.Message, error) {
	m, err := envelope.DecodeJSON([]byte(body))
	if err != nil {
		return nil, damaged("exchangedb: a stored message does not decode: %w", err)
	}
	return m, nil
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func parseUUID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, damaged("exchangedb: a stored id %q: %w", s, err)
	}
	return id, nil
}

// collect reads rows with scan, one call per row, and closes them.
func collect(ctx context.Context, q Querier, scan func(Rows) error, query string, args ...any) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ownerErr is the memory engine's error about an owner.
func ownerErr(role string, owner uuid.UUID, err error) error {
	return &exchange.OwnerError{Owner: owner, Role: role, Err: err}
}

func timeOfNanos(ns int64) time.Time { return time.Unix(0, ns) }
