package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
)

// requestStore opens a store remembering max request ids a scope, on a clock the test moves, with
// commits failing as faults says.
func requestStore(t *testing.T, max int, faults *commitFaults) (*Store, *exchangetest.Clock) {
	t.Helper()
	clock := exchangetest.NewClock(time.Unix(1_800_000_000, 0))
	s := faultStoreConfig(t, StoreConfig{RequestMax: max, RequestTTL: time.Minute, Clock: clock.Now}, faults)
	return s, clock
}

// addWithID adds an instruction under request id, and reports whether it was a repeat.
func addWithID(t *testing.T, s *Store, branch uuid.UUID, id string) bool {
	t.Helper()
	res, err := s.AddMessage(context.Background(), branch, addInput("hello"), store.WriteOptions{RequestID: id})
	if err != nil {
		t.Fatalf("AddMessage %s: %v", id, err)
	}
	return res.Replayed
}

// requestIDs lists the request ids the requests table holds, in order, separated by spaces.
func requestIDs(t *testing.T, s *Store) string {
	t.Helper()
	var ids string
	err := s.db.read.QueryRowContext(context.Background(),
		`SELECT COALESCE(group_concat(request_id, ' '), '') FROM (SELECT request_id FROM requests ORDER BY request_id)`).Scan(&ids)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// The writer numbers a scope's records itself (requestBook): a commit that fails must leave it as
// the database is, or the next record's number runs ahead and the bound forgets a record it should
// keep. ADR-0010's window: "the last RequestMax ids" of the scope are remembered.
func TestRequestBookAfterFailedCommit(t *testing.T) {
	faults := &commitFaults{}
	s, _ := requestStore(t, 2, faults)
	branch := emptyBranch(t, s)
	addWithID(t, s, branch, "a") // 1
	addWithID(t, s, branch, "b") // 2
	faults.inject(1, ioError{})
	if _, err := s.AddMessage(context.Background(), branch, addInput("lost"), store.WriteOptions{RequestID: "c"}); err == nil {
		t.Fatal("the write whose commit failed succeeded")
	}
	addWithID(t, s, branch, "d") // 3: forgets 1 ("a"), keeps "b"
	if !addWithID(t, s, branch, "b") {
		t.Fatal(`"b" is one of the last 2 ids of its scope, but its repeat wrote anew`)
	}
	if addWithID(t, s, branch, "a") {
		t.Fatal(`"a" is past the bound of 2 ids, but its repeat was answered`)
	}
}

// A write under a savepoint (CreateBranch here) whose record's statements fail after its number was
// taken is rolled back alone while its batch commits: the book must not count the record it undid,
// or the next record's number runs ahead and the bound forgets one id too many (review of this
// change: with the number kept before the deletes, "b" was forgotten and its repeat created a new
// branch).
func TestRequestBookAfterFailedRecord(t *testing.T) {
	s, _ := requestStore(t, 2, nil)
	ctx := context.Background()
	create := func(id string) store.BranchResult {
		t.Helper()
		res, err := s.CreateBranch(ctx, store.CreateBranchInput{RequestID: id})
		if err != nil {
			t.Fatalf("CreateBranch %s: %v", id, err)
		}
		return res
	}
	exec := func(q string) {
		t.Helper()
		if err := s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	create("a") // 1
	b := create("b")
	// The next record's delete of the scope's oldest fails (on the writer's connection only).
	exec(`CREATE TEMP TRIGGER fail_forget BEFORE DELETE ON main.requests BEGIN SELECT RAISE(ABORT, 'injected'); END`)
	if _, err := s.CreateBranch(ctx, store.CreateBranchInput{RequestID: "c"}); err == nil {
		t.Fatal("the create whose record failed succeeded")
	}
	exec(`DROP TRIGGER temp.fail_forget`)
	create("d") // 3: forgets 1 ("a"), keeps "b"
	if again := create("b"); again.Branch.ID != b.Branch.ID {
		t.Fatal(`"b" is one of the last 2 ids of its scope, but its repeat created another branch`)
	}
	if got := requestIDs(t, s); got != "b d" {
		t.Fatalf("request ids %q, want %q", got, "b d")
	}
}

// The expired records are forgotten by a write at least a second (of the store's clock) after the
// last forgetting, not by every write; an expired id is never answered meanwhile, as recall checks
// a record's age (ADR-0010's window).
func TestRequestBookExpiry(t *testing.T) {
	s, clock := requestStore(t, 100, nil)
	branch := emptyBranch(t, s)
	t0 := clock.Now()
	at := func(d time.Duration) { clock.Add(t0.Add(d).Sub(clock.Now())) }
	addWithID(t, s, branch, "a") // forgets (the first write)
	at(500 * time.Millisecond)
	addWithID(t, s, branch, "b")
	at(time.Minute + 200*time.Millisecond)
	addWithID(t, s, branch, "c") // forgets: "a" is past the window, "b" not yet
	if got := requestIDs(t, s); got != "b c" {
		t.Fatalf("request ids %q, want %q", got, "b c")
	}
	at(time.Minute + 600*time.Millisecond) // "b" is past the window; the last forgetting was 0.4 s ago
	addWithID(t, s, branch, "d")
	if got := requestIDs(t, s); got != "b c d" {
		t.Fatalf("request ids %q, want %q (the expired kept until the next forgetting)", got, "b c d")
	}
	if addWithID(t, s, branch, "b") {
		t.Fatal("an expired request id was answered before it was forgotten")
	}
	at(time.Minute + 1300*time.Millisecond)
	addWithID(t, s, branch, "e") // forgets, and nothing else has expired
	if got := requestIDs(t, s); got != "b c d e" {
		t.Fatalf("request ids %q, want %q", got, "b c d e")
	}
}

// A remembered write result holds the text the write stored its message with (txState.stored) —
// which must be the message's own encoding, as rowjson.EncodeResult writes it from the message:
// for a message the factory made before the write reached the writer, and for one the write
// changed in place (a target).
func TestRememberedResultText(t *testing.T) {
	s, _ := requestStore(t, 100, nil)
	ctx := context.Background()
	branch := emptyBranch(t, s)
	first, err := s.AddMessage(ctx, branch, addInput("first <b> & x"), store.WriteOptions{RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	target := first.Message.Message.ID
	in := addInput("changed")
	in.Target = &target
	changed, err := s.AddMessage(ctx, branch, in, store.WriteOptions{RequestID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	for id, r := range map[string]store.WriteResult{"r1": first, "r2": changed} {
		want, err := rowjson.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := s.db.read.QueryRowContext(ctx, `SELECT result FROM requests WHERE request_id = ?`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("request %s remembered\n%s\nwant\n%s", id, got, want)
		}
	}
}
