package exchangetest

import (
	"errors"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// testSendRefusesNUL pins docs/decisions/0012 row 24: a Send whose recipient, channel or request id
// holds U+0000 is refused on every engine, naming the field, and queues nothing. PostgreSQL accepted
// such a recipient at Send and then failed every collect of the sender for ever (SQLSTATE 22021 on
// the dead letter's recipient), while memory and sqlite made it a dead letter.
func testSendRefusesNUL(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	ch := "c\x00"
	for _, tc := range []struct {
		name, field string
		req         exchange.SendRequest
	}{
		{"recipient", "recipient", exchange.SendRequest{Sender: ownerA, Recipient: envelope.ParseParticipant("x\x00")}},
		{"channel", "channel", exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB), Channel: &ch}},
		{"request id", "", exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "r\x00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := x.svc.Send(ctx(t), tc.req)
			if tc.field == "" {
				if !errors.Is(err, exchange.ErrInvalidRequestID) {
					t.Fatalf("err = %v, want ErrInvalidRequestID", err)
				}
				return
			}
			var fe *envelope.FieldError
			if !errors.Is(err, envelope.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want envelope.ErrInvalid naming %s", err, tc.field)
			}
		})
	}
	if m, ok, err := x.svc.Remembered(ctx(t), ownerA, "r\x00", nil); err != nil || ok {
		t.Errorf("Remembered(r\\x00) = %v, %v, %v; want nothing and no error", m, ok, err)
	}
	if s := x.get(ownerA); len(s.Outbox) != 0 {
		t.Errorf("refused sends queued %v", contents(s.Outbox))
	}
	// The sender's outbox still collects.
	x.send(ownerA, to(ownerB), "after")
	if rep := x.collect(ownerA); rep.Delivered != 1 {
		t.Errorf("collect after the refusals delivered %d, want 1", rep.Delivered)
	}
}
