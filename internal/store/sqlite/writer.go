package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/historyd/historyd/internal/store"
)

// ErrClosed is a write to a closed store.
var ErrClosed = fmt.Errorf("sqlite: %w", store.ErrClosed)

// DefaultMaxBatch is how many writes one transaction takes at most.
const DefaultMaxBatch = 256

// writer is the one goroutine that writes (group commit): it takes the
// writes waiting for it, runs each inside one transaction under its own
// savepoint (a write that fails is rolled back alone and changes nothing;
// an unguarded one, without, tells whether it left anything to undo, and
// if so the batch runs again without it), commits once, then runs each successful write's after function in
// order and answers. So N concurrent writers cost one commit, one fsync
// with --sync=full, instead of N (docs/development.md#toolchain measured ≈1.5k commits/s
// with FULL, ≈18k writes/s in transactions of 64).
//
// It holds the write connection for its life, so it can read the
// connection's page counters and checkpoint the WAL between batches
// (checkpoint.go).
//
// Owner and stop path: Open's caller owns it through the store; close
// stops it after the batch in progress and answers what is still queued
// with ErrClosed, then releases the connection.
type writer struct {
	conn     *sql.Conn
	sp       savepoints
	reqs     chan *job
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	commits atomic.Int64 // transactions committed
	writes  atomic.Int64 // writes committed

	storage writerStats   // the storage metrics the writer keeps (checkpoint.go)
	ckpt    *checkpointer // runs the passive checkpoints (checkpoint.go)

	// onAbort, when set, runs on the writer goroutine when a batch's
	// commit fails: what the batch's writes left in memory is void.
	onAbort func()
	// onCommit, when set, runs on the writer goroutine after a commit:
	// the database took a write (the store's health).
	onCommit func()
	// fault, when set, sorts the error a write returns (storage faults
	// name the file; faults.go).
	fault func(error) error
	// failCommit, when set, is asked before each commit and fails it with
	// the error it returns (fault injection: tests and the
	// historyd_testhook build, never production).
	failCommit func() error
}

// job is one write: fn runs inside the batch's transaction; after, when
// fn succeeded and the transaction committed, runs on the writer
// goroutine in commit order (publishing to subscribers goes there, so
// subscribers see commits in sequence order).
type job struct {
	// fn gets the writer's context, never the caller's: a statement
	// interrupted by a caller's cancellation would roll back the whole
	// batch's transaction (SQLite's interrupt), and a statement bound to a
	// cancelled context fails for every later job of the batch.
	fn     func(ctx context.Context, tx *sql.Tx) error
	after  func()
	err    chan error      // cap 1
	caller context.Context // checked once, before fn runs: a caller gone by then is not written for
	// readOnly marks a job whose fn writes nothing (a pin): a batch whose
	// commit fails for want of space runs it again alone (commit).
	readOnly bool
	// unguarded marks a job run without a savepoint of its own
	// (doUnguardedAsync): its fn tells a failure that left nothing
	// written from one that may have (dirtyError).
	unguarded bool
}

// dirtyError is what the fn of an unguarded job returns when it failed
// after it wrote, or with one of SQLite's errors (some end the
// transaction): without a savepoint what it wrote cannot be undone alone,
// so the batch is rolled back and its other writes run again without it
// (commit), as when a write fills the disk.
type dirtyError struct{ err error }

func (e dirtyError) Error() string { return e.err.Error() }
func (e dirtyError) Unwrap() error { return e.err }

// errWroteNothing is what the fn of an unguarded job returns when it
// succeeded without writing (a repeated request answered from its record):
// the job succeeded, and like a pin it needs no space, so a commit that
// fails with SQLITE_FULL runs it again in a transaction of its own instead
// of failing it with the batch's writes (commit). A repeat told "nothing
// was changed" would be wrong: its first attempt did commit.
var errWroteNothing = errors.New("sqlite: the job wrote nothing")

// newWriter takes db's write connection (db has one: SQLite has one
// writer; db.write is nil from then on) and starts the writer on it.
// hooks are the tests' (none in production).
func newWriter(ctx context.Context, db *DB, maxBatch int, hooks checkpointHooks) (*writer, error) {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	conn, prepared, err := db.takeWrite(ctx, savepointSQL[:]...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: the write connection: %w", err)
	}
	w := &writer{conn: conn, reqs: make(chan *job, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	copy(w.sp.prepared[:], prepared)
	if w.ckpt, err = openCheckpointer(ctx, db.checkpointDSN); err != nil {
		w.sp.close()
		conn.Close()
		return nil, fmt.Errorf("sqlite: the checkpointer's connection: %w", err)
	}
	w.storage.init(hooks)
	go w.runCheckpointer()
	go w.run()
	return w, nil
}

// do runs fn in the next batch and returns its error, or the commit's.
// Once queued, a write is not abandoned: ctx only bounds the wait for a
// place in the queue.
//
// fn may run more than once (commit re-runs a batch's other writes when
// one of them fills the disk): it must set whatever it tells after or its
// caller afresh on every run.
func (w *writer) do(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, after func()) error {
	return w.submit(ctx, &job{fn: fn, after: after, err: make(chan error, 1), caller: ctx})
}

// doReadOnly is do for an fn that only reads: it goes on when the disk is
// full (issue 15: "reads go on").
func (w *writer) doReadOnly(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, after func()) error {
	return w.submit(ctx, &job{fn: fn, after: after, err: make(chan error, 1), caller: ctx, readOnly: true})
}

// doUnguardedAsync queues fn as do does and returns at once; wait returns
// what do would have, and must be called once. Jobs queued one after
// another by one goroutine run in the order queued (the queue is FIFO and
// batches run in turn), usually in one transaction: AppendMessages
// pipelines a window of items through it, so they cost one commit (issue
// 21).
//
// fn runs without a savepoint of its own: it must do its checks before its
// first write, so that most of its failures (a missing branch, a stale
// head, a bad input) leave nothing written, and return a dirtyError for
// the others. A savepoint costs each write two statements and a copy of
// every page it first touches (SQLite's statement journal); the writes of
// the store's branches (write.go) run this way (issue 14).
func (w *writer) doUnguardedAsync(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, after func()) (wait func() error) {
	j := &job{fn: fn, after: after, err: make(chan error, 1), caller: ctx, unguarded: true}
	if err := w.enqueue(ctx, j); err != nil {
		return func() error { return err }
	}
	return func() error { return w.await(j) }
}

func (w *writer) submit(ctx context.Context, j *job) error {
	if err := w.enqueue(ctx, j); err != nil {
		return err
	}
	return w.await(j)
}

// enqueue puts j on the writer's queue, waiting for a place at most as
// long as ctx.
func (w *writer) enqueue(ctx context.Context, j *job) error {
	select {
	case w.reqs <- j:
		return nil
	case <-w.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for a queued job's answer.
func (w *writer) await(j *job) error {
	var err error
	select {
	case err = <-j.err:
	case <-w.done:
		// The writer answers every job it took before it closes done; one
		// that is not answered was never run.
		select {
		case err = <-j.err:
		default:
			return ErrClosed
		}
	}
	if err != nil && w.fault != nil {
		return w.fault(err)
	}
	return err
}

// close stops the writer and waits for it.
func (w *writer) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *writer) run() {
	defer close(w.done)
	defer w.conn.Close() // back to the pool, which Close closes: the last connection closed checkpoints the WAL and removes it
	defer w.sp.close()
	defer w.storage.idle.Stop()
	defer w.ckpt.close() // before the write connection goes back: it stays the last one closed
	batch := make([]*job, 0, cap(w.reqs))
	for {
		select {
		case j := <-w.reqs:
			batch = append(batch[:0], j)
		case <-w.storage.idleC():
			w.idle()
			continue
		case <-w.stop:
			w.drain()
			return
		}
		w.gather(&batch)
		w.commit(batch)
		clear(batch)
		w.committed()
	}
}

// gatherYields bounds the yields of one gather.
const gatherYields = 4

// gather adds to the batch the writes queued behind its first. Before it
// takes them it yields (runtime.Gosched), and again after each yield that
// brought more, up to gatherYields times: the callers the last batch
// answered, and the requests on their way to the writer, are runnable
// goroutines that queue their next write as soon as they run, and a
// yield lets them run first, so the batch takes them instead of leaving
// each to a commit of its own. Every commit writes the pages all its
// writes share (the tables' last pages, the branch rows' pages, the
// database header) and, with --sync=full, fsyncs once: at concurrency 50
// over gRPC the batches went from about 4 writes to about 12, in
// process from about 9 to about 35 (issue 14).
// A yield with nothing else to run returns at once: a lone write waits
// for nothing; one with work to run lets it run, as its goroutines would
// have anyway.
func (w *writer) gather(batch *[]*job) {
	for yields := 0; len(*batch) < cap(w.reqs); {
		n := len(*batch)
	more:
		for len(*batch) < cap(w.reqs) {
			select {
			case j := <-w.reqs:
				*batch = append(*batch, j)
			default:
				break more
			}
		}
		if yields == gatherYields || (yields > 0 && len(*batch) == n) {
			return
		}
		yields++
		runtime.Gosched()
	}
}

// drain answers the jobs still queued at stop.
func (w *writer) drain() {
	for {
		select {
		case j := <-w.reqs:
			j.err <- ErrClosed
		default:
			return
		}
	}
}

// commit runs one batch in one transaction. A savepoint that cannot be
// made, rolled back or released leaves the transaction in a state no later
// job may build on: the batch ends there and is rolled back. When a job's
// SQLITE_FULL ended the transaction, that job alone fails and the others
// run again; any other error fails every job in the batch (an I/O error
// or a damaged page would most likely fail the re-run too).
func (w *writer) commit(batch []*job) {
	errs := make([]error, len(batch))
	answer := func(err error) {
		for i, j := range batch {
			if errs[i] == nil {
				errs[i] = err
			}
			j.err <- errs[i]
		}
	}
	ctx := context.Background() // a queued write is not abandoned once it runs
	begin := time.Now()
	tx, err := w.conn.BeginTx(ctx, nil)
	if err != nil {
		answer(fmt.Errorf("sqlite: begin: %w", err))
		return
	}
	ok, firstOK := 0, len(batch)
	stale := make([]bool, len(batch))    // an error worked out over an earlier write of the batch
	readOnly := make([]bool, len(batch)) // the job wrote nothing in this run
	for i, j := range batch {
		if errs[i] = j.caller.Err(); errs[i] != nil {
			continue
		}
		readOnly[i] = j.readOnly
		var fatal error
		if j.unguarded {
			var wroteNothing bool
			errs[i], fatal, wroteNothing = unguarded(ctx, tx, j.fn)
			readOnly[i] = wroteNothing
		} else {
			errs[i], fatal = w.sp.run(ctx, tx, j.fn)
		}
		if fatal != nil {
			_ = tx.Rollback()
			w.aborted()
			cause := errs[i]
			if cause != nil && (j.unguarded || resultCode(cause) == sqlite3.SQLITE_FULL) {
				// The write's error ended the transaction: SQLite rolls the
				// whole transaction back on SQLITE_FULL (issue 15), and the
				// savepoint went with it; or the write had no savepoint
				// and may have left something written. That write fails
				// alone, with its error; the batch's other writes run again
				// in a new transaction (their functions write only inside
				// it, set what they answer afresh on each run, and what they
				// left in memory went with aborted).
				j.err <- cause
				w.commit(slices.Concat(batch[:i], batch[i+1:]))
				return
			}
			clear(errs)
			if cause != nil {
				errs[i] = cause // the batch's other writes are told why
			} else {
				cause = fatal
			}
			answer(fmt.Errorf("sqlite: a write's savepoint: %w", cause))
			return
		}
		switch {
		case errs[i] == nil:
			ok++
			firstOK = min(firstOK, i)
		case i > firstOK:
			stale[i] = true
		}
	}
	if ok == 0 {
		_ = tx.Rollback()
		answer(nil)
		return
	}
	if err := w.commitTx(ctx, tx); err != nil {
		w.aborted()
		err = commitError{err}
		var reads []*job
		for i, j := range batch {
			switch {
			case errs[i] != nil && !stale[i]:
				j.err <- errs[i]
			case errs[i] != nil:
				// Its error was worked out over an earlier write of the
				// batch, now rolled back (a DeleteBranch before an
				// AddMessage's NOT_FOUND, a head a SEQUENCE_MISMATCH
				// names): the commit's error, which is retryable, is the
				// true answer.
				j.err <- err
			case readOnly[i] && resultCode(err) == sqlite3.SQLITE_FULL:
				reads = append(reads, j)
			default:
				j.err <- err
			}
		}
		if len(reads) > 0 && len(reads) < ok {
			// On a real full disk SQLITE_FULL comes at COMMIT (the WAL
			// cannot grow), so it fails every job of the batch: the
			// read-only ones (pins, and writes that wrote nothing: a
			// repeat answered from its record) need no space and run
			// again in a transaction of their own (issue 15: "reads go
			// on").
			w.commit(reads)
		} else {
			for _, j := range reads {
				j.err <- err
			}
		}
		return
	}
	w.storage.recordCommit(begin, time.Now(), ok)
	w.commits.Add(1)
	w.writes.Add(int64(ok))
	if w.onCommit != nil {
		w.onCommit()
	}
	for i, j := range batch {
		if errs[i] == nil && j.after != nil {
			j.after()
		}
	}
	answer(nil)
}

// commitTx commits tx; when that fails, nothing of it stays: SQLite may
// leave the transaction open after a failed COMMIT (SQLITE_FULL,
// SQLITE_IOERR), and the next BEGIN on the one write connection would
// fail, so it is rolled back on the connection (an error there means it
// was already rolled back).
func (w *writer) commitTx(ctx context.Context, tx *sql.Tx) error {
	if w.failCommit != nil {
		if err := w.failCommit(); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	err := tx.Commit()
	if err != nil {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
	}
	return err
}

// aborted tells the owner that a batch it may have seen apply did not.
func (w *writer) aborted() {
	if w.onAbort != nil {
		w.onAbort()
	}
}

// unguarded runs the fn of an unguarded job: its dirtyError, or a panic,
// is fatal (what it wrote stays in the transaction); its other errors
// left nothing written; errWroteNothing is a success that wrote nothing.
func unguarded(ctx context.Context, tx *sql.Tx, fn func(ctx context.Context, tx *sql.Tx) error) (err, fatal error, wroteNothing bool) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite: write panicked: %v", p)
			fatal, wroteNothing = err, false
		}
	}()
	err = fn(ctx, tx)
	if d, ok := errors.AsType[dirtyError](err); ok {
		return d.err, d.err, false
	}
	if err == errWroteNothing {
		return nil, nil, true
	}
	return err, nil, false
}

// savepoints runs each write of a batch under a savepoint of its own. Its
// three statements are prepared once, on the write connection, and bound
// to each batch's transaction once (writer goroutine only): made from
// their text on every use, as tx.ExecContext does (the driver prepares
// and finalizes the statement each time), they cost more CPU than the
// write's own statements (issue 14: an AddMessage at concurrency 50 went
// from about 157 to about 115 µs of CPU in BenchmarkAddMessageSyncNormal).
type savepoints struct {
	prepared [len(savepointSQL)]*sql.Stmt // on the write pool's one connection (DB.takeWrite)
	tx       *sql.Tx
	bound    [len(savepointSQL)]*sql.Stmt // prepared, bound to tx (closed with it)
}

// The savepoint statements, by their index in savepoints.
const (
	spSave = iota
	spRollback
	spRelease
)

var savepointSQL = [...]string{spSave: "SAVEPOINT w", spRollback: "ROLLBACK TO w", spRelease: "RELEASE w"}

// exec runs savepoint statement i in tx.
func (sp *savepoints) exec(ctx context.Context, tx *sql.Tx, i int) error {
	if sp.tx != tx {
		sp.tx, sp.bound = tx, [len(savepointSQL)]*sql.Stmt{}
	}
	if sp.bound[i] == nil {
		sp.bound[i] = tx.StmtContext(context.Background(), sp.prepared[i])
	}
	_, err := sp.bound[i].ExecContext(ctx)
	return err
}

// close closes the prepared statements (the writer's end).
func (sp *savepoints) close() {
	sp.tx, sp.bound = nil, [len(savepointSQL)]*sql.Stmt{}
	for _, st := range sp.prepared {
		if st != nil {
			st.Close()
		}
	}
}

// run runs fn under a savepoint of tx: on its error (or panic) what it
// wrote is rolled back and the rest of the batch is untouched. fatal is
// set when the savepoint itself could not be made, rolled back or
// released: the transaction can no longer be trusted.
func (sp *savepoints) run(ctx context.Context, tx *sql.Tx, fn func(ctx context.Context, tx *sql.Tx) error) (err, fatal error) {
	if err := sp.exec(ctx, tx, spSave); err != nil {
		return err, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite: write panicked: %v", p)
		}
		if err != nil {
			if rerr := sp.exec(ctx, tx, spRollback); rerr != nil {
				fatal = rerr
			}
		}
		if rerr := sp.exec(ctx, tx, spRelease); rerr != nil && fatal == nil {
			fatal = rerr
		}
	}()
	return fn(ctx, tx), nil
}
