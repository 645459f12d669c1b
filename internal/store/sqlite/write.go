package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// mutation is the body of a branch write, run in the write transaction
// after the repeat and head checks.
type mutation func(st *txState) (sqlrow.Written, error)

// write runs one branch write on the writer goroutine: in its transaction
// the repeat check (first, docs/design.md#idempotency), the head check, fn,
// the events, the branch row and the request's record; after the commit,
// the publication to subscribers; then, outside, the observers
// (ADR-0006 D4). A failed write changes nothing: it runs without a
// savepoint (writer.doUnguardedAsync), so one that failed before its first
// write statement left nothing to undo, and one that failed after it, or
// with SQLite's error, is a dirtyError: the writer rolls its batch back
// and runs the others again without it.
func (s *Store) write(ctx context.Context, id uuid.UUID, op store.Op, opts store.WriteOptions, fn mutation) (store.WriteResult, error) {
	return s.writeAsync(ctx, id, op, opts, fn)()
}

// writeAsync is write, queued without waiting (writer.doUnguardedAsync): wait
// returns what write would have. What the writer goroutine sets is read
// after wait's receive of the job's answer, which orders the two.
func (s *Store) writeAsync(ctx context.Context, id uuid.UUID, op store.Op, opts store.WriteOptions, fn mutation) (wait func() (store.WriteResult, error)) {
	var (
		w      sqlrow.Written
		replay *store.WriteResult
		row    *sqlrow.Branch
	)
	done := s.w.doUnguardedAsync(ctx, func(ctx context.Context, tx *sql.Tx) error {
		w, replay, row = sqlrow.Written{}, nil, nil // a re-run of the batch starts afresh (writer.do)
		writes := s.wst.writes
		err := s.runWrite(ctx, tx, id, op, opts, fn, &w, &replay, &row)
		switch {
		case err != nil && (s.wst.writes != writes || resultCode(err) != 0):
			return dirtyError{err}
		case err == nil && s.wst.writes == writes: // a repeat answered from its record
			return errWroteNothing
		}
		return err
	}, func() {
		if replay == nil {
			s.publish(id, row.Incarnation, w.Commit)
		}
	})
	return func() (store.WriteResult, error) {
		err := done()
		switch {
		case err != nil:
			return store.WriteResult{}, err
		case replay != nil:
			return *replay, nil
		case w.Added == nil:
			return w.Res, nil
		}
		obs := s.observersOf(id, row.Incarnation)
		if len(obs) == 0 {
			return w.Res, nil
		}
		return w.Res, store.Notify(ctx, id, obs, w.Added)
	}
}

// runWrite is the body of a branch write in the writer's transaction
// (writeAsync): it sets what the write answers through w, replay and row.
func (s *Store) runWrite(ctx context.Context, tx *sql.Tx, id uuid.UUID, op store.Op, opts store.WriteOptions, fn mutation,
	w *sqlrow.Written, replay **store.WriteResult, rowp **sqlrow.Branch) error {
	row, err := s.writerRow(ctx, tx, id)
	if err != nil {
		return err
	}
	*rowp = row
	scope := sqlrow.BranchScope(row.Incarnation)
	if r, ok, err := s.recall(ctx, &s.wst, tx, scope, op, opts.RequestID); err != nil || ok {
		if ok {
			res := r.(store.WriteResult)
			res.Replayed = true
			*replay = &res
		}
		return err
	}
	st := s.state(ctx, tx, row)
	if err := store.CheckHead(st, opts); err != nil {
		return err
	}
	if *w, err = fn(st); err != nil {
		return err
	}
	if err := s.commitEvents(ctx, tx, row, w.Commit); err != nil {
		return err
	}
	if err := s.updateBranch(ctx, tx, row); err != nil {
		return err
	}
	if err := s.remember(ctx, tx, scope, op, opts.RequestID, w.Res, st.Stored); err != nil {
		return err
	}
	s.keepRow(row)
	return nil
}

// maxCachedRows bounds the writer's cache of branch rows.
const maxCachedRows = 4096

// writerRow returns a copy of the branch's row for a write to change
// (writer goroutine).
func (s *Store) writerRow(ctx context.Context, tx *sql.Tx, id uuid.UUID) (*sqlrow.Branch, error) {
	if r, ok := s.rows[id]; ok {
		cp := *r // a write replaces the row's pointer fields, never changes what they point to
		return &cp, nil
	}
	return s.loadBranch(ctx, &s.wst, tx, id)
}

// keepRow caches the row a successful write left (writer goroutine).
func (s *Store) keepRow(row *sqlrow.Branch) {
	if len(s.rows) >= maxCachedRows {
		clear(s.rows)
	}
	s.rows[row.ID] = row
}

// commitEvents writes a commit's events, brings the branch's head to its
// last, and deletes what the log no longer retains.
func (s *Store) commitEvents(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch, c store.Commit) error {
	first, last := c[0].Sequence, c[len(c)-1].Sequence
	for i := range c {
		c[i].CommitFirst, c[i].CommitLast = first, last
	}
	if err := s.insertEvents(ctx, tx, row.Incarnation, c); err != nil {
		return err
	}
	row.Head = last
	below := s.sweepBelow(row.ID, row.Incarnation, last)
	if below <= 1 { // the log is within its retention: nothing to trim
		return nil
	}
	_, err := s.wst.exec(ctx, tx, qTrimEvents, blob(row.Incarnation), below)
	return err
}

// commit applies a plan's placements as one commit (sqlrow.CommitPlan),
// or returns the error its planning ended with.
func (st *txState) commit(plan store.Plan, err error) (sqlrow.Written, error) {
	if err != nil {
		return sqlrow.Written{}, err
	}
	return sqlrow.CommitPlan(st.Row, plan, st.apply)
}

// SetSystem is set_system (store.Store).
func (s *Store) SetSystem(ctx context.Context, id uuid.UUID, system *envelope.Message, opts store.WriteOptions) (store.WriteResult, error) {
	return s.write(ctx, id, store.OpSetSystem, opts, func(st *txState) (sqlrow.Written, error) {
		return st.commit(store.PlanSetSystem(st, system))
	})
}

// AddMessage is add_message (store.Store). When the inputs name no message
// of the branch, the factory runs here, before the write reaches the
// writer, and the message's text is encoded here too: the one writer
// goroutine bounds the engine's throughput, so what needs no branch state
// is done by the caller's goroutine. A factory error is returned where
// PlanAdd would return it, after the repeat and head checks.
func (s *Store) AddMessage(ctx context.Context, id uuid.UUID, in store.AddInput, opts store.WriteOptions) (store.WriteResult, error) {
	return s.AddMessageAsync(ctx, id, in, opts)()
}

var _ store.Pipeliner = (*Store)(nil)

// AddMessageAsync is AddMessage queued on the writer without waiting
// (store.Pipeliner, issue 21): the factory and encoding run here, on the
// caller's goroutine, then the write joins the writer's queue behind the
// ones queued before it, so a stream's window of items on one branch
// apply in order and usually commit together (one fsync with
// --sync=full).
func (s *Store) AddMessageAsync(ctx context.Context, id uuid.UUID, in store.AddInput, opts store.WriteOptions) func() (store.WriteResult, error) {
	pre := sqlrow.Prebuild(in)
	return s.writeAsync(ctx, id, store.OpAddMessage, opts, func(st *txState) (sqlrow.Written, error) {
		return st.commit(pre.Plan(&st.State, in))
	})
}

// CreateActionResponse answers an ActionRequest (store.Store).
func (s *Store) CreateActionResponse(ctx context.Context, id uuid.UUID, in store.ActionResponseInput, opts store.WriteOptions) (store.WriteResult, error) {
	return s.write(ctx, id, store.OpCreateActionResponse, opts, func(st *txState) (sqlrow.Written, error) {
		return st.commit(store.PlanActionResponse(st, in))
	})
}

// ClearMessages is clear_messages (store.Store): the system stays at index
// 0; the selected progression keeps only what survives; the entries start
// again at position 0 in a new epoch, so older page tokens are stale.
func (s *Store) ClearMessages(ctx context.Context, id uuid.UUID, opts store.WriteOptions) (store.WriteResult, error) {
	return s.write(ctx, id, store.OpClearMessages, opts, func(st *txState) (sqlrow.Written, error) {
		row := st.Row
		if _, err := s.wst.exec(st.ctx, st.tx, qKeepVersions, blob(row.ID), blob(row.Incarnation), optBlob(row.SystemID)); err != nil {
			return sqlrow.Written{}, err
		}
		if _, err := s.wst.exec(st.ctx, st.tx, qClearMessages, blob(row.ID)); err != nil {
			return sqlrow.Written{}, err
		}
		clear(st.Cache)
		return sqlrow.Clear(row), nil
	})
}

// SetProgression sets or unsets the selected progression (store.Store).
// Every id must be a member, once.
func (s *Store) SetProgression(ctx context.Context, id uuid.UUID, order *[]uuid.UUID, opts store.WriteOptions) (store.WriteResult, error) {
	return s.write(ctx, id, store.OpSetProgression, opts, func(st *txState) (sqlrow.Written, error) {
		ids, err := store.PlanProgression(st, order)
		if err != nil {
			return sqlrow.Written{}, err
		}
		return sqlrow.SetProgression(st.Row, order, ids), nil
	})
}
