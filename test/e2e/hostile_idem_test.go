//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 11 case 6 ("Another client can make your retry write twice") and case 8 (the nil UUID),
// against the real binary. ADR-0010.

const (
	idemVictimToken = "idempotency-victim-token-0123456789"
	idemOtherToken  = "idempotency-other-token-0123456789a"
	// idemPerBranch is how many ids the other client writes on each of its branches: a scope's
	// promised window is its last 10,000 ids, so no single scope of the other client's evicts its
	// own ids either; the total crosses the old store-wide cap all the same.
	idemPerBranch = 10_000
	// idemWorkers is how many calls the other client keeps in flight.
	idemWorkers = 16
)

// TestHostileIdempotencyVictim: issue 11 acceptance: "The victim's retry in case 6 writes nothing,
// after 100,001 ids written elsewhere." A victim writes with request id R on its branch and
// creates a branch with request id C; another client (another token) writes 100,001 distinct ids
// on its own branches and creates branches under 10,001 ids of its own; the victim's retries
// return the first responses and write nothing. The count crosses the old store-wide cap of
// 100,000 at both sizes: measured here, the 120,000 calls take 35 s from 16 workers on the shared
// 2-core machine (some 3,400 calls a second), so `make e2e` runs it whole; `make hostile` writes
// 1 KB messages instead of 1 byte, for RSS figures closer to real traffic.
func TestHostileIdempotencyVictim(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokens(t, filepath.Join(dir, "tokens"), idemVictimToken, idemOtherToken)
	p := startServer(t, "--auth-tokens-file", tokens)
	c := historyv1.NewHistoryServiceClient(dial(t, p))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	victim, other := withToken(ctx, idemVictimToken), withToken(ctx, idemOtherToken)

	vb, err := c.CreateBranch(victim, &historyv1.CreateBranchRequest{RequestId: "C", Name: strPtr("victim")})
	if err != nil {
		t.Fatal(err)
	}
	branch := vb.GetBranch().GetId()
	add := func(ctx context.Context, b, requestID, text string) (*historyv1.AddMessageResponse, error) {
		return c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, RequestId: requestID, Input: &historyv1.AddMessageRequest_Instruction{
			Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text}}}})
	}
	first, err := add(victim, branch, "R", "the victim's one message")
	if err != nil {
		t.Fatal(err)
	}

	base := procMem(t, p)
	resetPeak(t, p)
	const otherIDs = 100_001
	text := hostileSize(strings.Repeat("x", 1000), "x")
	start := time.Now()
	// The other client's creates: one more id than its scope keeps, each branch deleted at once.
	inParallel(t, idemPerBranch+1, func(i int) error {
		res, err := c.CreateBranch(other, &historyv1.CreateBranchRequest{RequestId: fmt.Sprint("c-", i)})
		if err != nil {
			return err
		}
		_, err = c.DeleteBranch(other, &historyv1.DeleteBranchRequest{BranchId: res.GetBranch().GetId()})
		return err
	})
	// Its writes: otherIDs distinct ids over branches of its own, idemPerBranch on each.
	var branches []string
	for range (otherIDs + idemPerBranch - 1) / idemPerBranch {
		res, err := c.CreateBranch(other, &historyv1.CreateBranchRequest{})
		if err != nil {
			t.Fatal(err)
		}
		branches = append(branches, res.GetBranch().GetId())
	}
	inParallel(t, otherIDs, func(i int) error {
		_, err := add(other, branches[i/idemPerBranch], fmt.Sprint("w-", i), text)
		return err
	})
	t.Logf("the other client wrote %d ids and created %d branches in %v", otherIDs, idemPerBranch+1, time.Since(start).Round(time.Millisecond))
	// Figures only: the ids and their messages are charged to the memory budget (default 1 GiB),
	// which bounds them; issue 11 sets no RSS bound for this case.
	assertPeakWithin(t, p, base, 1<<30, "100,001 ids of another client")

	again, err := add(victim, branch, "R", "a second message")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first, again) {
		t.Errorf("the victim's retry returned\n %v\nnot the first response\n %v", again, first)
	}
	list, err := c.ListMessages(victim, &historyv1.ListMessagesRequest{BranchId: branch})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetMessages()); n != 1 {
		t.Errorf("the victim's branch holds %d messages after its retry, want 1: the retry wrote", n)
	}
	vb2, err := c.CreateBranch(victim, &historyv1.CreateBranchRequest{RequestId: "C", Name: strPtr("a second branch")})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(vb, vb2) {
		t.Errorf("the victim's create retry returned branch %s, not its first branch %s", vb2.GetBranch().GetId(), branch)
	}
	// The other token's request id "C" is its own: it creates a branch.
	ob, err := c.CreateBranch(other, &historyv1.CreateBranchRequest{RequestId: "C"})
	if err != nil || ob.GetBranch().GetId() == branch {
		t.Errorf("the other client's create with the victim's request id = %v, %v; want a branch of its own", ob, err)
	}
}

// TestHostileNilUUID: issue 11 case 8: the nil UUID as a branch id is INVALID_ARGUMENT naming the
// field, on create (which used to make a random branch) and on reads (which used to be NOT_FOUND),
// through grpcurl against the real binary.
func TestHostileNilUUID(t *testing.T) {
	p := startServer(t)
	const nilUUID = "00000000-0000-0000-0000-000000000000"
	for _, tc := range []struct{ method, body string }{
		{"CreateBranch", `{"branch_id": "` + nilUUID + `"}`},
		{"GetBranch", `{"branch_id": "` + nilUUID + `"}`},
		{"ImportBranch", `{"branch_id": "` + nilUUID + `", "data": "[]"}`},
		{"AddMessage", `{"branch_id": "` + nilUUID + `", "instruction": {"instruction": "x"}}`},
	} {
		t.Run(tc.method, func(t *testing.T) {
			out, err := grpcurlStatus(t, "-plaintext", "-d", tc.body, p.addr, "historyd.v1.HistoryService/"+tc.method)
			if err == nil {
				t.Fatalf("grpcurl succeeded: %s", out)
			}
			for _, want := range []string{`"code": 3`, "nil UUID", "ERROR_REASON_INVALID_FIELD", "branch_id"} {
				if !strings.Contains(out, want) {
					t.Errorf("grpcurl output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	out := grpcurl(t, "-plaintext", "-d", `{}`, p.addr, "historyd.v1.HistoryService/ListBranches")
	if strings.Contains(out, `"id"`) {
		t.Errorf("a refused create made a branch: %s", out)
	}
}

// inParallel runs call(0) ... call(n-1) from idemWorkers goroutines and fails the test at the
// first error.
func inParallel(t *testing.T, n int, call func(i int) error) {
	t.Helper()
	jobs := make(chan int)
	errs := make(chan error, idemWorkers)
	var wg sync.WaitGroup
	for range idemWorkers {
		wg.Add(1)
		go func() { // owned by inParallel: ends when jobs is closed
			defer wg.Done()
			for i := range jobs {
				if err := call(i); err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case err := <-errs:
			t.Error(err)
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// grpcurlStatus runs grpcurl with -format-error and returns its combined output and exit error.
func grpcurlStatus(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, grpcurlBin, append([]string{"-format-error"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func strPtr(s string) *string { return &s }
