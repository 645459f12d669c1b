package client_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// retry.go, settlements: Ack, Nack and ExtendLease are retried after a lost response, since a
// repeat changes nothing ("an Ack or Nack with a stale receipt ... is FAILED_PRECONDITION and
// changes nothing"); Lease is not (a retry would lease more messages). Each call's response is cut
// after the server applied it.
func TestRetrySettlements(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	leaseOwners(t, direct, &historyv1.RegisterRequest{})
	ids := mail(t, direct, "one", "two")
	ctx := testContext(t)
	if _, err := c.Exchange.ListOwners(ctx, &historyv1.ListOwnersRequest{}); err != nil {
		t.Fatal(err) // connects through the proxy
	}

	// Lease: not retried; the lost response's lease holds its message until the deadline.
	rec.reset(nil)
	p.CutBeforeResponse()
	if _, err := c.Exchange.Lease(ctx, &historyv1.LeaseRequest{OwnerId: leaseB}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Lease over a cut connection: %v, want UNAVAILABLE", err)
	}
	if n := len(rec.Attempts()); n != 1 {
		t.Errorf("Lease: %d attempts, want 1", n)
	}
	if _, leases := inbox(t, direct); !leases[ids[0]].GetLeased() {
		t.Errorf("leases %v: the cut Lease was applied and holds %s", leases, ids[0])
	}

	leased, err := c.Exchange.Lease(ctx, &historyv1.LeaseRequest{OwnerId: leaseB})
	if err != nil || len(leased.GetLeased()) != 1 || leased.GetLeased()[0].GetMessage().GetId() != ids[1] {
		t.Fatalf("Lease = %v, %v; want the other message, %s", leased, err, ids[1])
	}
	receipt := leased.GetLeased()[0].GetReceipt()

	// ExtendLease: retried, and the repeat extends again.
	rec.reset(nil)
	p.CutBeforeResponse()
	ext, err := c.Exchange.ExtendLease(ctx, &historyv1.ExtendLeaseRequest{OwnerId: leaseB, Receipt: receipt, VisibilityTimeout: durationpb.New(time.Minute)})
	if err != nil || ext.GetDeadline() == nil {
		t.Fatalf("ExtendLease with retries: %v, %v", ext, err)
	}
	if a := rec.Attempts(); len(a) != 2 || a[0].code != codes.Unavailable || a[1].code != codes.OK {
		t.Errorf("ExtendLease attempts %+v, want UNAVAILABLE then OK", a)
	}

	// Ack: retried; the first attempt acknowledged the message, so the repeat finds its receipt
	// stale and changes nothing: the ambiguity LeaseError documents.
	rec.reset(nil)
	p.CutBeforeResponse()
	_, err = c.Exchange.Ack(ctx, &historyv1.AckRequest{OwnerId: leaseB, Receipt: receipt})
	if client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_LEASE_STALE {
		t.Errorf("Ack whose response was lost, retried: %v, want LEASE_STALE", err)
	}
	if a := rec.Attempts(); len(a) != 2 || a[0].code != codes.Unavailable || a[1].code != codes.FailedPrecondition {
		t.Errorf("Ack attempts %+v, want UNAVAILABLE then FAILED_PRECONDITION", a)
	}
	if left, _ := inbox(t, direct); len(left) != 1 || left[0] != ids[0] {
		t.Errorf("B's inboxes hold %v, want only %s: the Ack applied once", left, ids[0])
	}
}
