//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// TestReplicasConversation: issue 16 acceptance: "it runs docs/examples/conversation.sh against
// each replica in turn on the same branch". The script deletes its fixed branch and creates it
// again, so its run on replica 2 deletes what its run on replica 1 wrote, and so on; each run must
// pass (runConversation checks every step's output), and after each, the two other replicas must
// read the branch exactly as the script left it: its name and user, its messages (new ones, not the
// previous run's) and its head.
func TestReplicasConversation(t *testing.T) {
	noLeaks(t)
	ps := startReplicas(t, pgtest.New(t), 3)
	clients := make([]historyv1.HistoryServiceClient, len(ps))
	for i, p := range ps {
		clients[i] = historyClient(t, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	var before []string // the previous run's message ids
	for i, p := range ps {
		steps := runConversation(t, p)
		var want []string
		for _, raw := range steps["list"].Messages {
			var m struct{ ID string }
			if err := json.Unmarshal(raw, &m); err != nil || m.ID == "" {
				t.Fatalf("run on replica %d: a listed message %s has no id (%v)", i+1, raw, err)
			}
			want = append(want, m.ID)
		}
		head, err := strconv.ParseUint(steps["list"].HeadSequence, 10, 64)
		if err != nil || len(want) == 0 {
			t.Fatalf("run on replica %d: list printed head %q and %d messages", i+1, steps["list"].HeadSequence, len(want))
		}
		for _, id := range want {
			if slices.Contains(before, id) {
				t.Fatalf("run on replica %d: message %s is the previous run's: the branch was not deleted and made again", i+1, id)
			}
		}
		before = want
		for j, c := range clients {
			if j == i {
				continue
			}
			br, err := c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: conversationBranch})
			if err != nil {
				t.Fatalf("after the run on replica %d, GetBranch on replica %d: %v", i+1, j+1, err)
			}
			if b := br.GetBranch(); b.GetName() != "demo" || b.GetUser() != "alice" || b.GetHeadSequence() != head {
				t.Errorf("after the run on replica %d, replica %d reads the branch as name %q user %q head %d; the script made demo, alice, head %d",
					i+1, j+1, b.GetName(), b.GetUser(), b.GetHeadSequence(), head)
			}
			list, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: conversationBranch, PageSize: 100, OmitRendered: true})
			if err != nil {
				t.Fatalf("after the run on replica %d, ListMessages on replica %d: %v", i+1, j+1, err)
			}
			var got []string
			for _, m := range list.GetMessages() {
				got = append(got, m.GetId())
			}
			if !slices.Equal(got, want) || list.GetHeadSequence() != head {
				t.Errorf("after the run on replica %d, replica %d lists %v at head %d; the script listed %v at head %d",
					i+1, j+1, got, list.GetHeadSequence(), want, head)
			}
		}
	}
	stopReplicas(t, ps...)
}
