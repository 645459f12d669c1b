//go:build e2e

package e2e

import (
	"context"
	"slices"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Issue 17 acceptance: "docs/examples/exchange.sh passes against a sqlite server across a restart
// and against each of two postgres replicas": the mail the script leaves behind is in the database,
// so a restarted server, or another replica, holds it.

// checkExchangeLeftover checks, through c, what a run of exchange.sh (steps) leaves: A, B and C
// registered; C's broadcast in the inboxes of A and B (B popped A's direct message); A's message
// with no recipient among A's dead letters; C's inboxes empty.
func checkExchangeLeftover(ctx context.Context, t *testing.T, c historyv1.ExchangeServiceClient, steps map[string]exampleResponse, where string) {
	t.Helper()
	owners, err := c.ListOwners(ctx, &historyv1.ListOwnersRequest{})
	if err != nil {
		t.Fatalf("%s: ListOwners: %v", where, err)
	}
	var ids []string
	for _, o := range owners.GetOwners() {
		ids = append(ids, o.GetOwnerId())
	}
	if !slices.Equal(ids, []string{ownerA, ownerB, ownerC}) {
		t.Errorf("%s: owners %v, exchange.sh left %v", where, ids, []string{ownerA, ownerB, ownerC})
	}
	broadcast := steps["C to all"].Message.ID
	for owner, want := range map[string][]string{ownerA: {broadcast}, ownerB: {broadcast}, ownerC: nil} {
		got, err := c.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: owner, OmitRendered: true})
		if err != nil {
			t.Fatalf("%s: Receive %s: %v", where, owner, err)
		}
		var gotIDs []string
		for _, m := range got.GetMessages() {
			gotIDs = append(gotIDs, m.GetId())
		}
		if !slices.Equal(gotIDs, want) {
			t.Errorf("%s: %s's inboxes hold %v, exchange.sh left %v", where, owner, gotIDs, want)
		}
	}
	dl, err := c.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, OmitRendered: true})
	if err != nil {
		t.Fatalf("%s: ListDeadLetters: %v", where, err)
	}
	if d := dl.GetDeadLetters(); len(d) != 1 || d[0].GetMessage().GetId() != steps["A to nobody"].Message.ID ||
		d[0].GetReason() != historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNSET_RECIPIENT {
		t.Errorf("%s: A's dead letters %v, exchange.sh left its message %s with no recipient", where, d, steps["A to nobody"].Message.ID)
	}
}

// TestExchangeExampleRestart: exchange.sh against a sqlite server; SIGTERM; the server started
// again on the same --data-dir holds the mail the script left, and answers a Send request id from
// before the restart with the message it made (the proto's window: request ids are in the database
// too); then the script passes again (it unregisters its owners first, which returns that mail).
func TestExchangeExampleRestart(t *testing.T) {
	dir := t.TempDir()
	p := startSQLite(t, dir)
	steps := runExchangeExample(t, p)
	checkExchangeExample(t, steps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	c := historyv1.NewExchangeServiceClient(dial(t, p))
	send := &historyv1.SendRequest{Sender: ownerA, Recipient: structpb.NewStringValue(ownerB), ContentJson: proto.String(`"before the restart"`), RequestId: "restart-1"}
	sent, err := c.Send(ctx, send)
	if err != nil {
		t.Fatalf("Send before the restart: %v", err)
	}
	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}

	p = startSQLite(t, dir)
	c = historyv1.NewExchangeServiceClient(dial(t, p))
	checkExchangeLeftover(ctx, t, c, steps, "after the restart")
	again, err := c.Send(ctx, send)
	if err != nil {
		t.Fatalf("Send repeated after the restart: %v", err)
	}
	if again.GetMessage().GetId() != sent.GetMessage().GetId() {
		t.Errorf("request id restart-1 answered %s after the restart, %s before: written twice", again.GetMessage().GetId(), sent.GetMessage().GetId())
	}
	if a, err := c.Collect(ctx, &historyv1.CollectRequest{OwnerId: ownerA}); err != nil || a.GetDeliveredCount() != 1 {
		t.Errorf("Collect A after the restart: %v, %v; want the message sent before it delivered, once", a, err)
	}
	checkExchangeExample(t, runExchangeExample(t, p))
	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// TestReplicasExchangeExample: exchange.sh against each of two postgres replicas in turn; after
// each run, the other replica holds what the script left (one post office). Each run unregisters
// the owners the previous run left on the other replica, so each must pass from a clean start.
func TestReplicasExchangeExample(t *testing.T) {
	noLeaks(t)
	ps := startReplicas(t, pgtest.New(t), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	for i, p := range ps {
		steps := runExchangeExample(t, p)
		checkExchangeExample(t, steps)
		other := ps[1-i]
		checkExchangeLeftover(ctx, t, historyv1.NewExchangeServiceClient(dial(t, other)), steps, "the other replica after the run on replica "+string(rune('1'+i)))
	}
	stopReplicas(t, ps...)
}
