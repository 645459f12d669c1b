package exchangedb_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// TestRepeatOfAnOldNULRecord: a retry, after the upgrade, of a Send that an earlier version took on
// sqlite with U+0000 in its channel (its message since consumed and pruned) answers the first
// message's identity, as the repeat rule promises, and not a nil message with no error (review of
// the NUL fix: rebuilding the answer went through the new check, which refused it).
func TestRepeatOfAnOldNULRecord(t *testing.T) {
	forDBEngines(t, func(t *testing.T, open func([]exchange.Option, func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine) {
		if t.Name() != "TestRepeatOfAnOldNULRecord/sqlite" {
			t.Skip("PostgreSQL could never store such a record")
		}
		e := open(nil, nil)
		a, b := uuid.New(), uuid.New()
		register(t, e, a, b)
		ok := "ok"
		first, err := e.Send(tctx(t), exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(b), Channel: &ok, RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ForgeOldNULRecord(tctx(t), a, "r", first.ID); err != nil {
			t.Fatal(err)
		}
		ch := "c\x00"
		m, err := e.Send(tctx(t), exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(b), Channel: &ch, RequestID: "r"})
		if err != nil || m == nil || m.ID != first.ID {
			t.Fatalf("the retry answered %v, %v; want the first message's identity %s", m, err, first.ID)
		}
	})
}
