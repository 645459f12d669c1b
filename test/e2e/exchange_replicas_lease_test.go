//go:build e2e

package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// TestReplicasExchangeLeaseKill: issue 18, "At-least-once across crashes and replicas: ... with
// the leasing replica gone (postgres), a leased, unacknowledged message is delivered again after
// its deadline, with its attempt count". Two replicas A and B on one schema; B (the owner) leases
// A's message through a leasing SubscribeInbox on replica A (attempt 1), and replica A is killed
// with SIGKILL, its receiver's connection with it. On replica B, a Lease before the deadline finds
// nothing and names the deadline (the lease is 10s, so that it answers well before it on a loaded
// machine; it fails if not, rather than skip the check: review of issue 18, T1); a leasing
// SubscribeInbox on B is handed the message once the
// deadline has passed, with attempt 2; the first receipt is stale there, the second acknowledges
// it, and the ledger (read from the database) has it acked after 2 attempts.
func TestReplicasExchangeLeaseKill(t *testing.T) {
	noLeaks(t)
	const visibility = 10 * time.Second
	url := pgtest.New(t)
	pa, pb := startReplicaProcess(t, url), startReplicaProcess(t, url)
	awaitServing(t, pa)
	awaitServing(t, pb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	a, b := historyv1.NewExchangeServiceClient(dial(t, pa)), historyv1.NewExchangeServiceClient(dial(t, pb))
	registerLeaseOwners(ctx, t, a, 5, visibility)
	sent := sendCollected(ctx, t, a, `{"text": "leased on A, which dies"}`)

	onA := openLeaseStream(ctx, t, pa.addr)
	l1 := onA.next(t)
	if l1.GetMessage().GetId() != sent || l1.GetAttempt() != 1 {
		t.Fatalf("leased on replica A: message %s, attempt %d; want %s, attempt 1", l1.GetMessage().GetId(), l1.GetAttempt(), sent)
	}
	deadline := l1.GetDeadline().AsTime()
	stop(t, pa, syscall.SIGKILL, startTimeout) // the leasing replica is gone, and its receiver with it

	resp, err := b.Lease(ctx, &historyv1.LeaseRequest{OwnerId: ownerB, MaxMessages: 5, OmitRendered: true})
	if err != nil {
		t.Fatalf("Lease B on replica B: %v", err)
	}
	if answered := time.Now(); !answered.Before(deadline) {
		t.Fatalf("replica B answered Lease at %v, past the deadline %v of the lease taken on A: the check during the lease cannot be made (its %v is too short for this machine)",
			answered, deadline, visibility)
	}
	if len(resp.GetLeased()) != 0 || !resp.GetNextVisibleTime().AsTime().Equal(deadline) {
		t.Fatalf("Lease B on replica B while A's lease holds = %v, next visible %v; want none until %v", resp.GetLeased(), resp.GetNextVisibleTime().AsTime(), deadline)
	}
	onB := openLeaseStream(ctx, t, pb.addr)
	l2 := []*historyv1.LeasedMessage{onB.next(t)}
	if onB.at.Before(deadline.Add(-leaseSkew)) {
		t.Errorf("replica B handed the message out at %v, before the deadline %v of the lease taken on A", onB.at, deadline)
	}
	onB.kill()
	if len(l2) != 1 || l2[0].GetMessage().GetId() != sent || l2[0].GetAttempt() != 2 {
		t.Fatalf("leased on replica B after the deadline: %v; want message %s, attempt 2", l2, sent)
	}
	_, err = b.Ack(ctx, &historyv1.AckRequest{OwnerId: ownerB, Receipt: l1.GetReceipt()})
	wantLeaseStale(t, "the Ack on B of the lease taken on A", err)
	if _, err := b.Ack(ctx, &historyv1.AckRequest{OwnerId: ownerB, Receipt: l2[0].GetReceipt()}); err != nil {
		t.Fatalf("the Ack on B of attempt 2: %v", err)
	}
	var found bool
	for _, e := range readPostgresLedger(ctx, t, url) {
		if e.Message.String() != sent {
			continue
		}
		found = true
		if e.Recipient != ownerB || e.State != exchange.LedgerAcked || e.Attempts != 2 {
			t.Errorf("the ledger's entry of message %s = %+v, want B's, acked after 2 attempts", sent, e)
		}
	}
	if !found {
		t.Errorf("the ledger has no entry of message %s", sent)
	}
	stopReplicas(t, pb)
}
