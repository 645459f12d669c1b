package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// Options are the knobs some tests turn; a zero field means the backend's
// default.
type Options struct {
	// MemoryBudget is the backend's memory budget in bytes.
	MemoryBudget int64
	// EventRetention is how many events each branch's log keeps.
	EventRetention int
	// Clock is the clock of the idempotency window.
	Clock func() time.Time
	// RequestMax is how many request ids a scope remembers.
	RequestMax int
	// SubscriberBuffer is the default subscription buffer, in commits.
	SubscriberBuffer int
	// MaxSubscriptions is the limit of open subscriptions.
	MaxSubscriptions int
}

// Factory returns a new, empty store for one test.
type Factory func(t *testing.T, opts Options) store.Store

// Capabilities say which gated cases an engine runs; every other case runs
// on every engine.
type Capabilities struct {
	// MemoryBudget: the engine keeps its data in memory under a budget
	// (Memory). The gated cases are MemoryBudget, RequestIDsWithinBudget
	// and RequestIDsNotEvictedByBudget: they fill the budget until a write
	// is refused with ErrMemoryBudget, which an engine that keeps its data
	// on disk never does (issue 14: "--memory-budget keeps its meaning for
	// the memory engine").
	MemoryBudget bool
	// Elsewhere names cases that this run leaves to another run of the
	// same target, with where: an engine whose case is too slow under the
	// race detector runs it in a pass without it (the reason is printed).
	Elsewhere map[string]string
}

// budgetCases are the cases gated on Capabilities.MemoryBudget.
var budgetCases = map[string]bool{"MemoryBudget": true, "RequestIDsWithinBudget": true, "RequestIDsNotEvictedByBudget": true}

// Run runs the whole suite against the backend newStore makes.
func Run(t *testing.T, newStore Factory) {
	RunFor(t, newStore, Capabilities{MemoryBudget: true})
}

// RunFor runs the suite, the gated cases as caps allows.
func RunFor(t *testing.T, newStore Factory, caps Capabilities) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"CreateBranch", testCreateBranch},
		{"SystemPinned", testSystemPinned},
		{"AddOrReplace", testAddOrReplace},
		{"FactoryErrors", testFactoryErrors},
		{"KindChange", testKindChange},
		{"MessageErrorsNameFields", testMessageErrorsNameFields},
		{"Views", testViews},
		{"ToChatMessages", testToChatMessages},
		{"EachStopsTheRead", testEachStopsTheRead},
		{"SelectedProgression", testSelectedProgression},
		{"ActionResponse", testActionResponse},
		{"ClearMessages", testClearMessages},
		{"ListMessagesPaging", testListMessagesPaging},
		{"ListBranchesPaging", testListBranchesPaging},
		{"Sequences", testSequences},
		{"Idempotency", testIdempotency},
		{"ReplayAfterChanges", testReplayAfterChanges},
		{"DeleteRequestIDPerBranch", testDeleteRequestIDPerBranch},
		{"RequestIDsWithinBudget", testRequestIDsWithinBudget},
		{"ScopesIsolated", testScopesIsolated},
		{"PrincipalScopes", testPrincipalScopes},
		{"RequestIDsAfterRecreate", testRequestIDsAfterRecreate},
		{"RequestIDsNotEvictedByBudget", testRequestIDsNotEvictedByBudget},
		{"ExpectedHead", testExpectedHead},
		{"Issue13ExpectedHeadAhead", testIssue13ExpectedHeadAhead},
		{"LoadedValuesKept", testLoadedValuesKept},
		{"MemoryBudget", testMemoryBudget},
		{"FailedWritesChangeNothing", testFailedWritesChangeNothing},
		{"Observers", testObservers},
		{"ObserversReentrant", testObserversReentrant},
		{"Subscribe", testSubscribe},
		{"SubscribeErrors", testSubscribeErrors},
		{"SubscriberTooSlow", testSubscriberTooSlow},
		{"SubscriberTooSlowBytes", testSubscriberTooSlowBytes},
		{"SubscribeStart", testSubscribeStart},
		{"SubscribeKinds", testSubscribeKinds},
		{"SubscribeCaughtUp", testSubscribeCaughtUp},
		{"SubscribeDeleteWhenFull", testSubscribeDeleteWhenFull},
		{"SubscribeEventsAPI", testSubscribeEventsAPI},
		{"SubscribeDeepCatchUp", testSubscribeDeepCatchUp},
		{"SubscribeCatchUpWhileWriting", testSubscribeCatchUpWhileWriting},
		{"SubscribeCatchUpOvertaken", testSubscribeCatchUpOvertaken},
		{"SubscribeDeleteWhileCatchingUp", testSubscribeDeleteWhileCatchingUp},
		{"SubscribeClosedWhileCatchingUpAfterDelete", testSubscribeClosedWhileCatchingUpAfterDelete},
		{"SubscriptionLimit", testSubscriptionLimit},
		{"Fork", testFork},
		{"ImportExport", testImportExport},
		{"ImportErrors", testImportErrors},
		{"NULInBranchTexts", testNULInBranchTexts},
		{"ExportLionAGIBytes", testExportLionAGIBytes},
		{"ExportFloatsAsOrjson", testExportFloatsAsOrjson},
		{"DeleteBranch", testDeleteBranch},
		{"ConcurrentAddsOneBranch", testConcurrentOneBranch},
		{"ConcurrentAddsManyBranches", testConcurrentManyBranches},
		{"RetryRacingFirstAttempt", testRetryRacingFirstAttempt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if budgetCases[tc.name] && !caps.MemoryBudget {
				t.Skip("gated: the engine has no memory budget (storetest.Capabilities)")
			}
			if where, ok := caps.Elsewhere[tc.name]; ok {
				t.Skip("runs elsewhere: " + where)
			}
			tc.fn(t, newStore)
		})
	}
}

// ctx returns a context bounded so that a bug fails the test instead of
// hanging it.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// text returns a JSON string.
func text(s string) jsonv.Value { return jsonv.StringValue(s) }

// mustJSON parses JSON text.
func mustJSON(t *testing.T, s string) jsonv.Value {
	t.Helper()
	v, err := jsonv.ParseString(s)
	if err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

// newBranch creates an empty branch.
func newBranch(t *testing.T, st store.Store) uuid.UUID {
	t.Helper()
	res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{})
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	return res.Branch.ID
}

// addInstruction adds add_message(instruction=text).
func addInstruction(t *testing.T, st store.Store, b uuid.UUID, s string) store.WriteResult {
	t.Helper()
	res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text(s)}}, store.WriteOptions{})
	if err != nil {
		t.Fatalf("AddMessage(instruction=%q): %v", s, err)
	}
	return res
}

// addFactory adds through the factory and fails the test on error.
func addFactory(t *testing.T, st store.Store, b uuid.UUID, f store.Factory) store.WriteResult {
	t.Helper()
	res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: f}, store.WriteOptions{})
	if err != nil {
		t.Fatalf("AddMessage: %v", err)
	}
	return res
}

// order returns the branch's full order of ids.
func order(t *testing.T, st store.Store, b uuid.UUID) []uuid.UUID {
	t.Helper()
	return ids(t, listAll(t, st, b, store.ListInput{}))
}

// listAll pages through a listing and returns every message.
func listAll(t *testing.T, st store.Store, b uuid.UUID, in store.ListInput) []store.StoredMessage {
	t.Helper()
	var out []store.StoredMessage
	for {
		page, err := st.ListMessages(ctx(t), b, in)
		if err != nil {
			t.Fatalf("ListMessages(%+v): %v", in, err)
		}
		out = append(out, page.Messages...)
		if page.NextPageToken == "" {
			return out
		}
		in.PageToken = page.NextPageToken
	}
}

func ids(t *testing.T, msgs []store.StoredMessage) []uuid.UUID {
	t.Helper()
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.Message.ID
	}
	return out
}

// head returns the branch's head sequence.
func head(t *testing.T, st store.Store, b uuid.UUID) uint64 {
	t.Helper()
	info, err := st.GetBranch(ctx(t), b)
	if err != nil {
		t.Fatalf("GetBranch: %v", err)
	}
	return info.HeadSequence
}

// sameIDs reports whether two id lists are equal.
func sameIDs(a, b []uuid.UUID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// wantErr fails the test unless err wraps target.
func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

// snapshot is what a failed write must leave unchanged.
type snapshot struct {
	head  uint64
	order []uuid.UUID
	json  string
}

func take(t *testing.T, st store.Store, b uuid.UUID) snapshot {
	t.Helper()
	exp, err := st.ExportBranch(ctx(t), b, store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatalf("ExportBranch: %v", err)
	}
	return snapshot{head: exp.Head, order: order(t, st, b), json: exp.Data.String()}
}

// unchanged fails the test when the branch differs from the snapshot.
func unchanged(t *testing.T, st store.Store, b uuid.UUID, before snapshot) {
	t.Helper()
	after := take(t, st, b)
	if after.head != before.head || !sameIDs(after.order, before.order) || after.json != before.json {
		t.Fatalf("a failed request changed the branch:\n before head %d %s\n after  head %d %s", before.head, before.json, after.head, after.json)
	}
}

func ptr[T any](v T) *T { return &v }
