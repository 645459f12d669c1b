package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// retryRounds is how many times each branch-creating call races its retry.
const retryRounds = 200

// testRetryRacingFirstAttempt: a branch-creating call with an explicit id
// and a request id, retried while its first attempt is still in flight (a
// hedged or timed-out call), gets the first attempt's result, never
// ALREADY_EXISTS: the branch that exists is that attempt's
// (docs/design.md#idempotency: a repeated request_id returns the first
// response). An engine that recalls the request before it checks the id,
// in two reads, can see neither the record nor the branch and then the
// branch without the record.
func testRetryRacingFirstAttempt(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	src := newBranch(t, st)
	if _, err := st.AddMessage(ctx(t), src, store.AddInput{Factory: store.Factory{Instruction: text("copied")}}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	exp, err := st.ExportBranch(ctx(t), src, store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		name string
		do   func(id uuid.UUID, requestID string) (store.BranchResult, error)
	}{
		{"CreateBranch", func(id uuid.UUID, requestID string) (store.BranchResult, error) {
			return st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id, RequestID: requestID})
		}},
		{"ImportBranch", func(id uuid.UUID, requestID string) (store.BranchResult, error) {
			return st.ImportBranch(ctx(t), store.ImportInput{Data: exp.Data, ID: id, RequestID: requestID})
		}},
		{"ForkBranch", func(id uuid.UUID, requestID string) (store.BranchResult, error) {
			return st.ForkBranch(ctx(t), store.ForkInput{Source: src, ID: id, RequestID: requestID})
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			for round := range retryRounds {
				id, requestID := uuid.New(), fmt.Sprint(call.name, "-retry-", round)
				var (
					wg   sync.WaitGroup
					res  [2]store.BranchResult
					errs [2]error
				)
				for k := range res {
					wg.Add(1)
					go func() { defer wg.Done(); res[k], errs[k] = call.do(id, requestID) }()
				}
				wg.Wait()
				for k, err := range errs {
					if err != nil {
						t.Fatalf("round %d: attempt %d: %v, want the first attempt's result", round, k, err)
					}
				}
				if res[0].Replayed == res[1].Replayed || res[0].Branch.Incarnation != res[1].Branch.Incarnation {
					t.Fatalf("round %d: replayed %v and %v, incarnations %v and %v; want a first result and its replay",
						round, res[0].Replayed, res[1].Replayed, res[0].Branch.Incarnation, res[1].Branch.Incarnation)
				}
			}
		})
	}
}
