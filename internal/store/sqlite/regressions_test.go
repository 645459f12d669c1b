package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Defects a review of the engine found, each with the test that showed it.

func addInput(text string) store.AddInput {
	return store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(text)}}
}

func emptyBranch(t *testing.T, s *Store) uuid.UUID {
	t.Helper()
	r, err := s.CreateBranch(context.Background(), store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Branch.ID
}

// holdWriter blocks the writer with a job until release is closed.
func holdWriter(t *testing.T, s *Store) (release, done chan struct{}) {
	t.Helper()
	running := make(chan struct{})
	release, done = make(chan struct{}), make(chan struct{})
	go func() { // owned here: ends when release is closed
		defer close(done)
		_ = s.w.do(context.Background(), func(context.Context, *sql.Tx) error { close(running); <-release; return nil }, nil)
	}()
	<-running
	return release, done
}

// inBatch runs jobs, each on a goroutine of its own and queued in order
// behind a held writer, as one batch of the writer, and returns once each
// has returned.
func inBatch(t *testing.T, s *Store, jobs ...func()) {
	t.Helper()
	release, done := holdWriter(t, s)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		go func() { defer wg.Done(); job() }()
		queued(s, i+1)
	}
	close(release)
	<-done
	wg.Wait()
}

// queued waits until n jobs wait for the held writer.
func queued(s *Store, n int) {
	for len(s.w.reqs) < n {
		runtime.Gosched()
	}
}

// A caller that gives up while its write is queued must not fail the
// other writes of its batch: statements run under the writer's context,
// not the caller's (a statement bound to a cancelled context failed for
// every later job, and a cancellation mid-statement interrupted SQLite,
// rolling the whole batch back).
func TestCancelledCallerFailsAlone(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	a, b := emptyBranch(t, s), emptyBranch(t, s)
	release, done := holdWriter(t, s)
	ctxA, cancelA := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); _, errA = s.AddMessage(ctxA, a, addInput("a"), store.WriteOptions{}) }()
	queued(s, 1)
	go func() {
		defer wg.Done()
		_, errB = s.AddMessage(context.Background(), b, addInput("b"), store.WriteOptions{})
	}()
	queued(s, 2)
	cancelA()
	close(release)
	<-done
	wg.Wait()
	if errB != nil {
		t.Errorf("a write batched with a cancelled caller's failed: %v", errB)
	}
	if !errors.Is(errA, context.Canceled) {
		t.Errorf("the cancelled caller's write: %v, want context.Canceled (it was not run)", errA)
	}
	if info, err := s.GetBranch(context.Background(), a); err != nil || info.HeadSequence != 1 {
		t.Errorf("the cancelled caller's branch: head %d, %v; want 1 (nothing written)", info.HeadSequence, err)
	}
}

// lateCancel is a caller's context that is live when the writer checks it,
// before the job runs, and cancelled from then on: a caller that gives up
// while its write is running.
type lateCancel struct {
	context.Context
	checked atomic.Bool
	done    chan struct{}
}

func newLateCancel() *lateCancel {
	return &lateCancel{Context: context.Background(), done: make(chan struct{})}
}

func (c *lateCancel) Done() <-chan struct{} { return c.done }

func (c *lateCancel) Err() error {
	if c.checked.CompareAndSwap(false, true) {
		close(c.done)
		return nil
	}
	return context.Canceled
}

// A ClearMessages whose caller gives up once the writer has taken it still
// runs its statements under the writer's context (the job.fn rule,
// writer.go), so it commits, and the writes batched with it are neither
// rolled back nor run again. Its statements ran under the caller's
// context: they failed with context.Canceled after the write had begun,
// which rolled the whole batch back.
func TestClearMessagesCancelledMidBatch(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	a, b := emptyBranch(t, s), emptyBranch(t, s)
	if _, err := s.AddMessage(context.Background(), a, addInput("gone soon"), store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var aborts atomic.Int32
	prev := s.w.onAbort // set before the batch is queued: the writer reads it after its receive
	s.w.onAbort = func() {
		aborts.Add(1)
		if prev != nil {
			prev()
		}
	}
	var errA, errB error
	inBatch(t, s,
		func() { _, errA = s.ClearMessages(newLateCancel(), a, store.WriteOptions{}) },
		func() { _, errB = s.AddMessage(context.Background(), b, addInput("b"), store.WriteOptions{}) })
	if errA != nil {
		t.Errorf("ClearMessages cancelled after the writer took it: %v, want it committed", errA)
	}
	if errB != nil {
		t.Errorf("the write batched with it: %v", errB)
	}
	if n := aborts.Load(); n != 0 {
		t.Errorf("%d batches rolled back, want 0", n)
	}
	if info, err := s.GetBranch(context.Background(), a); err != nil || info.MessageCount != 0 {
		t.Errorf("the cleared branch: %d messages, %v; want 0", info.MessageCount, err)
	}
}

// A job that leaves the transaction unusable (here: it ends it) rolls the
// whole batch back; it fails, the others run again, and every job is told
// what became of it: no write is reported failed yet committed, or
// reported committed yet rolled back.
func TestBrokenSavepointFailsTheBatch(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	a, c := emptyBranch(t, s), emptyBranch(t, s)
	var errA, errB, errC error
	inBatch(t, s,
		func() { _, errA = s.AddMessage(context.Background(), a, addInput("a"), store.WriteOptions{}) },
		func() {
			errB = s.w.do(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
					return err
				}
				return errors.New("the transaction was ended under the writer")
			}, nil)
		},
		func() { _, errC = s.AddMessage(context.Background(), c, addInput("c"), store.WriteOptions{}) })
	if errB == nil {
		t.Error("the job that broke the transaction succeeded")
	}
	for _, x := range []struct {
		name string
		id   uuid.UUID
		err  error
	}{{"before it", a, errA}, {"after it", c, errC}} {
		info, err := s.GetBranch(context.Background(), x.id)
		if err != nil {
			t.Fatal(err)
		}
		if stored := info.HeadSequence > 1; (x.err == nil) != stored {
			t.Errorf("the write %s: error %v, but stored %v (head %d)", x.name, x.err, stored, info.HeadSequence)
		}
	}
}

// A subscription whose log cannot be read ends with the log's error
// (here a missing event: ErrStorageDamaged, which the server answers
// DATA_LOSS) and never leaves its branch locked: the writer's next publish
// to the branch waited for that lock forever, and with it every write of
// the store. (The reader panicked here until its log was read through
// store.FallibleLog, with no lock held.)
func TestUnreadableLogDoesNotStopWrites(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	id := emptyBranch(t, s)
	for _, text := range []string{"a", "b", "c"} {
		if _, err := s.AddMessage(context.Background(), id, addInput(text), store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zero := uint64(0)
	sub, err := s.Subscribe(context.Background(), id, store.SubscribeInput{After: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := s.w.do(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM events WHERE seq = 2`) // a damaged log
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := sub.Next(context.Background()); !errors.Is(err, store.ErrStorageDamaged) {
		t.Errorf("reading past the missing event = %v, %v; want ErrStorageDamaged", c, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang fails the test, not the run
	defer cancel()
	if _, err := s.AddMessage(ctx, id, addInput("x"), store.WriteOptions{}); err != nil {
		t.Fatalf("a write to the branch after its reader failed: %v", err)
	}
}

// A branch watched once and never written again costs no memory once its
// subscription closes: the handle goes with the last subscription.
func TestClosedSubscriptionLetsTheHandleGo(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	for range 100 {
		sub, err := s.Subscribe(context.Background(), emptyBranch(t, s), store.SubscribeInput{})
		if err != nil {
			t.Fatal(err)
		}
		sub.Close()
	}
	s.mu.Lock()
	n := len(s.handles)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d handles after every subscription closed, want 0", n)
	}
}

// issue 14: a branch write runs without a savepoint (writer.doUnguardedAsync).
// One that fails after it wrote (here a trigger fails its event's insert,
// after its message's row went in) must leave nothing behind: the batch is
// rolled back and its other writes run again and commit; the failed one's
// message row is gone with it, and the branch takes its next write at the
// head it really has.
func TestDirtyWriteFailsAloneInItsBatch(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	ctx := context.Background()
	a, b, c := emptyBranch(t, s), emptyBranch(t, s), emptyBranch(t, s)
	if err := s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TEMP TRIGGER poison BEFORE INSERT ON events
			WHEN (SELECT body FROM messages WHERE tenant = '' AND id = NEW.msg_id) LIKE '%poison%'
			BEGIN SELECT RAISE(ABORT, 'poisoned'); END`)
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	release, done := holdWriter(t, s)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, w := range []struct {
		id   uuid.UUID
		text string
	}{{a, "a"}, {b, "poison"}, {c, "c"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.AddMessage(ctx, w.id, addInput(w.text), store.WriteOptions{})
		}()
		queued(s, i+1)
	}
	commits := s.w.commits.Load()
	close(release)
	<-done
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "poisoned") {
		t.Fatalf("the write whose event failed: %v, want the trigger's error", errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the batch's other writes failed: %v, %v", errs[0], errs[2])
	}
	if got := s.w.commits.Load() - commits; got != 2 { // the held job's batch, then the three's
		t.Errorf("%d commits, want 2 (the held job's, then the batch without the failed write)", got)
	}
	for id, want := range map[uuid.UUID]uint64{a: 2, b: 1, c: 2} {
		if got := head(t, s, id); got != want {
			t.Errorf("branch %s head %d, want %d", id, got, want)
		}
	}
	var rows int
	if err := s.db.read.QueryRowContext(ctx, "SELECT count(*) FROM messages WHERE branch_id = ?", blob(b)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("the failed write left %d message rows", rows)
	}
	if res, err := s.AddMessage(ctx, b, addInput("b"), store.WriteOptions{}); err != nil || res.Head != 2 {
		t.Fatalf("the next write on the failed write's branch: head %d, %v; want 2", res.Head, err)
	}
}
