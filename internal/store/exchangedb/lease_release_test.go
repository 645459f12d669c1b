package exchangedb_test

import (
	"errors"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
)

// engines are the database engines' factories, each test run on both.
var engines = []struct {
	name    string
	factory exchangetest.Factory
}{{"sqlite", sqliteFactory}, {"postgres", postgresFactory}}

// Review of issue 18, M1 (exchange.Service.Release: "the attempt is undone, as if the lease had
// not been taken ... it never makes a dead letter"), on the columns the conformance case does not
// see: a released last attempt (held = 2) leaves the sweep's index, so its deadline passing makes
// no dead letter; the row is an inbox row never leased again in the ledger (attempts 0); and the
// next Lease marks its last attempt anew, whose expiry is a dead letter with 1 attempt.
func TestReleaseUndoesTheRow(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			clk := newFakeClock()
			svc := eng.factory(t, exchangetest.Options{Clock: clk.Now})
			_, bob, sent := fill(t, svc, 1, exchange.OwnerSettings{MaxAttempts: 1, Visibility: time.Second})
			l := lease(t, svc, bob, 1)
			if err := svc.Release(tctx(t), bob, l.Leases[0].Receipt); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := svc.Release(tctx(t), bob, l.Leases[0].Receipt); !errors.Is(err, exchange.ErrLeaseStale) {
				t.Errorf("Release of a released lease = %v, want ErrLeaseStale", err)
			}
			if st := ledgerStates(t, svc.(exchange.Ledgered), sent); st[exchange.LedgerInbox] != 1 || len(st) != 1 {
				t.Errorf("ledger after the Release: %v, want one inbox row (never leased)", st)
			}
			clk.Add(time.Second) // past the released lease's deadline
			if p, err := svc.DeadLetters(tctx(t), bob, 0, 0); err != nil || len(p.Letters) != 0 {
				t.Fatalf("dead letters past a released last attempt's deadline = %+v, %v; want none", p.Letters, err)
			}
			again := lease(t, svc, bob, 1)
			if len(again.Leases) != 1 || again.Leases[0].Receipt.Attempt != 1 {
				t.Fatalf("Lease after the Release = %+v, want the message with attempt 1", again.Leases)
			}
			clk.Add(time.Second)
			p, err := svc.DeadLetters(tctx(t), bob, 0, 0)
			if err != nil || len(p.Letters) != 1 || p.Letters[0].Reason != exchange.ReasonMaxAttempts || p.Letters[0].Attempts != 1 {
				t.Fatalf("dead letters past the new last attempt's deadline = %+v, %v; want the message, max attempts, 1", p.Letters, err)
			}
		})
	}
}
