package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// Group commit (issue 16 benchmark, docs/decisions/0021): concurrent
// branch writes on different branches share one transaction, so that
// PostgreSQL commits, flushes its WAL and answers round trips once for
// the group instead of once a write. Measured with pgbench on the 2-core
// machines (50 clients, the engine's statements): one write a transaction
// ≈2.7k writes/s; ten a transaction ≈11.5k/s; a bare one-row INSERT a
// transaction ≈5.3k/s.
//
// A write joins the queue; one of the Store's group workers takes what is
// queued (up to groupMax writes, at most one a branch, none of a branch
// another group is writing: a branch's writes stay in queue order and
// never wait on one another's row lock here) and runs it as one
// transaction of two round trips, as a lone write is (write.go): [BEGIN,
// every branch row FOR UPDATE in id order (so two groups never deadlock),
// the request ids' recalls], then [every write's statements, COMMIT]. Each
// write's rules run on its own row as they would alone; a write its rules
// refuse (a bad input, a head mismatch, a repeat) queues nothing and is
// answered alone, and the others commit.
//
// A group that fails with nothing applied (a statement refused, a broken
// connection before COMMIT) is run again write by write, so that each
// write gets its own outcome, as it would have alone. A COMMIT without an
// answer is every member's outcome (StorageError AtCommit), as it is a
// lone write's. A write whose caller has left before its group starts is
// not written.
type group struct {
	mu      sync.Mutex
	queue   []*branchWrite
	writing map[uuid.UUID]bool // branches in a running group
	closed  bool
	ready   chan struct{} // a signal: the queue may hold a write a worker can take
	max     int
}

// Group commit's defaults: workers run groups at once, each holding one
// of the pool's connections while it runs.
const (
	groupMax     = 64
	groupWorkers = 4
)

// groupWorkerCount is how many group workers cfg asks for.
func groupWorkerCount(cfg Config) int {
	switch {
	case cfg.GroupWorkers < 0:
		return 0
	case cfg.GroupWorkers > 0:
		return cfg.GroupWorkers
	}

	return max(1, min(groupWorkers, int(cfg.MaxConns)/2))
}

func newGroup(max int) *group {
	return &group{writing: map[uuid.UUID]bool{}, ready: make(chan struct{}, 1), max: max}
}

// branchWrite is one branch write: its inputs, and its outcome once done
// is closed.
type branchWrite struct {
	ctx  context.Context
	id   uuid.UUID
	op   store.Op
	opts store.WriteOptions
	fn   mutation

	w      sqlrow.Written
	replay *store.WriteResult
	row    *sqlrow.Branch
	err    error
	alone  bool // to run in a transaction of its own, after its group
	done   chan struct{}
}

// signal wakes a worker (non-blocking: one pending signal is enough, a
// worker that takes writes signals again when it leaves some).
func (g *group) signal() {
	select {
	case g.ready <- struct{}{}:
	default:
	}
}

// enqueue adds a write, or fails once the group is closed.
func (g *group) enqueue(bw *branchWrite) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return store.ErrClosed
	}
	g.queue = append(g.queue, bw)
	g.signal()
	return nil
}

// take removes the writes a group can run now, in queue order: at most
// g.max, one a branch, none of a branch a running group writes. A write
// whose caller has left is answered with its context's error.
func (g *group) take() []*branchWrite {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		got  []*branchWrite
		kept = g.queue[:0]
	)
	for _, bw := range g.queue {
		switch {
		case bw.ctx.Err() != nil:
			bw.err = bw.ctx.Err()
			close(bw.done)
		case len(got) < g.max && !g.writing[bw.id]:
			g.writing[bw.id] = true
			got = append(got, bw)
		default:
			kept = append(kept, bw)
		}
	}
	clear(g.queue[len(kept):])
	g.queue = kept
	if len(kept) > 0 && len(got) > 0 {
		g.signal() // another worker may take what this group left
	}
	return got
}

// finish ends a group: its branches may be written again.
func (g *group) finish(ws []*branchWrite) {
	g.mu.Lock()
	for _, bw := range ws {
		delete(g.writing, bw.id)
	}
	if len(g.queue) > 0 {
		g.signal()
	}
	g.mu.Unlock()
}

// queued is how many writes wait in the queue.
func (g *group) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// close refuses new writes and answers the queued ones with ErrClosed.
func (g *group) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, bw := range g.queue {
		bw.err = store.ErrClosed
		close(bw.done)
	}
	g.queue = nil
}

// runGroupWorker runs groups until Close. Owner: the Store; stopped by
// Close (s.ctx), after which it answers what is still queued.
func (s *Store) runGroupWorker() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			s.group.close()
			return
		case <-s.group.ready:
		}
		if ws := s.group.take(); len(ws) > 0 {
			if s.hookTaken != nil {
				s.hookTaken(ws)
			}
			s.runGroup(ws) // and finishes them
		}
	}
}

// runGroup runs ws (distinct branches) and answers each: the members
// the group committed (or refused) first, then those it left to run alone
// (a row another transaction holds, an unknown branch, or every member of
// a group that failed with nothing applied), each in a transaction of its
// own. It finishes the first ones' branches before it runs the others, so
// that a member waiting for a row lock holds back its own branch only
// (docs/decisions/0021).
func (s *Store) runGroup(ws []*branchWrite) {
	alone := s.tryGroup(ws)
	answered := make([]*branchWrite, 0, len(ws)-len(alone))
	for _, bw := range ws {
		if !bw.alone {
			s.settleAsync(bw)
			close(bw.done)
			answered = append(answered, bw)
		}
	}
	s.group.finish(answered)
	for _, bw := range alone {
		bw.w, bw.replay, bw.row = sqlrow.Written{}, nil, nil
		bw.err = s.writeAlone(bw)
		s.settleAsync(bw)
		close(bw.done)
	}
	s.group.finish(alone)
}

// tryGroup runs ws as one transaction when there are several, and returns
// the members to run alone (marked alone).
func (s *Store) tryGroup(ws []*branchWrite) (alone []*branchWrite) {
	defer func() {
		// A panic outside the members' rules (which panic alone: planSafe)
		// fails the group's calls, as the recovery interceptor fails a call
		// whose handler panics, instead of ending the process from a
		// goroutine no interceptor covers; tryTx rolled the transaction back.
		if p := recover(); p != nil {
			err := fmt.Errorf("postgres: panic in a group commit: %v\n%s", p, debug.Stack())
			alone = nil
			for _, bw := range ws {
				bw.err, bw.alone = err, false
			}
		}
	}()
	if len(ws) == 1 {
		ws[0].alone = true
		return ws
	}
	ctx, cancel := groupContext(ws)
	defer cancel()
	err := s.inTx(ctx, func(tx pgx.Tx) error { return s.groupTx(ctx, tx, ws) })
	var se *StorageError
	switch {
	case err == nil:
		for _, bw := range ws {
			if bw.alone {
				alone = append(alone, bw)
			}
		}
		return alone
	case errors.As(err, &se) && se.AtCommit, errors.As(err, new(commitError)):
		// A COMMIT without an answer (StorageError AtCommit), or cut by the
		// group's context once every caller had left: its outcome is
		// unknown, as a lone write's would be, for the members it wrote.
		// Those left to run alone (a row another transaction held, an
		// unknown branch) were never in it: they still run alone, for
		// their own outcome.
		for _, bw := range ws {
			switch {
			case bw.alone:
				alone = append(alone, bw)
			case bw.err == nil && bw.replay == nil:
				bw.err = err
			}
		}
		return alone
	}
	// Nothing was applied: each write alone, for its own outcome.
	for _, bw := range ws {
		bw.alone = true
	}
	return ws
}

// groupContext is a group's context: cancelled once every member's caller
// has left (a group goes on as long as one of them waits for it).
func groupContext(ws []*branchWrite) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(ws)))
	stops := make([]func() bool, len(ws))
	for i, bw := range ws {
		stops[i] = context.AfterFunc(bw.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// groupTx is a group's transaction: the rows locked and the request ids
// recalled in one round trip, then each write planned on its row; the
// statements go with the COMMIT. A member's refusal is its own (bw.err);
// an error of the database or the connection fails the group.
func (s *Store) groupTx(ctx context.Context, tx pgx.Tx, ws []*branchWrite) error {
	ids := make([]uuid.UUID, len(ws))
	b := &pgx.Batch{}
	for i, bw := range ws {
		bw.w, bw.replay, bw.row, bw.err, bw.alone = sqlrow.Written{}, nil, nil, nil, false // a retried transaction starts afresh
		ids[i] = bw.id
	}
	b.Queue(qBranchesForUpdate, ids)
	for _, bw := range ws {
		if bw.opts.RequestID != "" {
			b.Queue(qBranchRequest, bw.id, bw.opts.RequestID)
		}
	}
	br := tx.SendBatch(ctx, b)
	rows, err := lockedRows(br)
	if err != nil {
		br.Close()
		return err
	}
	for _, bw := range ws {
		bw.row = rows[bw.id]
		if bw.opts.RequestID == "" {
			continue
		}
		r, ok, err := s.recalled(br.QueryRow(), bw.op, bw.opts.RequestID)
		if bw.row == nil {
			continue // run alone: the recall ran before its row was locked
		}
		switch {
		case err != nil && !memberError(err):
			br.Close()
			return err
		case err != nil:
			bw.err = err
		case ok:
			res := r.(store.WriteResult)
			res.Replayed = true
			bw.replay = &res
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	var batches []*pgx.Batch
	for _, bw := range ws {
		switch {
		case bw.row == nil:
			// Locked by another transaction (SKIP LOCKED), or no such
			// branch: alone, after the group, it waits for the lock or
			// reports the branch unknown, without holding the group.
			bw.err, bw.replay, bw.alone = nil, nil, true
			continue
		case bw.err != nil, bw.replay != nil:
			continue
		}
		st := newState(ctx, tx, bw.row)
		w, err := s.planSafe(st, bw)
		switch {
		case err != nil && !memberError(err):
			return err
		case err != nil:
			bw.err = err
		default:
			bw.w = w
			batches = append(batches, st.b)
		}
	}
	if s.hookGroup != nil {
		if err := s.hookGroup(ws); err != nil {
			return err
		}
	}
	return commitWith(ctx, tx, mergeAppends(batches))
}

// mergeAppends is the members' statements as one batch, their appends
// (qAppend, first in a batch when there is one: mergeAppend) made one
// statement over arrays, qAppendMany: a group's appends cost PostgreSQL
// one statement, not one each. The members' other statements follow in
// order; the members write different branches, so no statement of one
// reads what another's writes.
func mergeAppends(batches []*pgx.Batch) *pgx.Batch {
	var appends [][]any
	for _, b := range batches {
		if q := b.QueuedQueries; len(q) > 0 && q[0].SQL == qAppend {
			appends = append(appends, q[0].Arguments)
		}
	}
	out := &pgx.Batch{}
	if len(appends) > 1 {
		cols := make([]any, qAppendArgs)
		for c := range cols {
			col := make([]any, len(appends))
			for r, args := range appends {
				col[r] = args[c]
			}
			cols[c] = typedColumn(col)
		}
		out.Queue(qAppendMany, cols...)
	}
	for _, b := range batches {
		q := b.QueuedQueries
		if len(appends) > 1 && len(q) > 0 && q[0].SQL == qAppend {
			q = q[1:]
		}
		out.QueuedQueries = append(out.QueuedQueries, q...)
	}
	return out
}

// typedColumn returns a column of qAppendMany as a slice of one type, which
// pgx encodes without looking each element up: from []any it planned every
// element through reflection, and a uuid.UUID through its driver.Valuer
// (String, then a parse of the text): 11-12% of the server's CPU in the
// PostgreSQL AddMessage row's profile. NULLs (nil) are kept; a column of
// any other type, or of mixed types, is returned as it is.
func typedColumn(col []any) any {
	const (
		uuids = iota + 1
		ints
		texts
	)
	kind, nulls := 0, false
	for _, v := range col {
		k := 0
		switch v.(type) {
		case nil:
			nulls = true
			continue
		case uuid.UUID:
			k = uuids
		case int64, int:
			k = ints
		case string:
			k = texts
		default:
			return col
		}
		if kind != 0 && k != kind {
			return col
		}
		kind = k
	}
	switch {
	case kind == uuids:
		out := make([]pgtype.UUID, len(col))
		for i, v := range col {
			if u, ok := v.(uuid.UUID); ok {
				out[i] = pgtype.UUID{Bytes: u, Valid: true}
			}
		}
		return out
	case kind == ints && !nulls:
		out := make([]int64, len(col))
		for i, v := range col {
			switch n := v.(type) {
			case int64:
				out[i] = n
			case int:
				out[i] = int64(n)
			}
		}
		return out
	case kind == texts && !nulls:
		out := make([]string, len(col))
		for i, v := range col {
			out[i] = v.(string)
		}
		return out
	}
	return col
}

// planSafe is plan, with a panic in a member's rules made that member's
// error: the others commit.
func (s *Store) planSafe(st *txState, bw *branchWrite) (w sqlrow.Written, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("postgres: panic in a write: %v\n%s", p, debug.Stack())
		}
	}()
	return s.plan(st, bw)
}

// lockedRows reads the group's first result: the rows locked, by id.
func lockedRows(br pgx.BatchResults) (map[uuid.UUID]*sqlrow.Branch, error) {
	rs, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	rows := map[uuid.UUID]*sqlrow.Branch{}
	for rs.Next() {
		row, err := scanBranch(rs)
		if err != nil {
			return nil, err
		}
		rows[row.ID] = row
	}
	return rows, rs.Err()
}

// memberError reports whether a write's error is its own (its rules
// refused it) rather than the database's or the connection's, which fail
// its group.
func memberError(err error) bool {
	return storageClass(err) == nil && !errors.As(err, new(*pgconn.PgError)) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
