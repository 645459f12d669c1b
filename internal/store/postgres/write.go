package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// mutation is the body of a branch write, run in the write transaction
// after the repeat and head checks.
type mutation func(st *txState) (sqlrow.Written, error)

// write runs one branch write as one READ COMMITTED transaction (issue
// 16): the branch's row locked FOR UPDATE first (it orders the branch's
// writers across replicas, and is held only for this write), then the
// repeat check (docs/design.md#idempotency), the head check, fn (which
// reads messages by id only), and the events, row and request record in
// one batch with the COMMIT (two round trips in all: tx.go); after it,
// the publication to this replica's subscribers and the wake-up of the
// others (wake.go); then, outside, the observers (ADR-0006 D4). A failed
// write changes nothing. Concurrent writes on different branches share
// their transaction (group commit: group.go).
func (s *Store) write(ctx context.Context, id uuid.UUID, op store.Op, opts store.WriteOptions, fn mutation) (store.WriteResult, error) {
	bw := &branchWrite{ctx: ctx, id: id, op: op, opts: opts, fn: fn, done: make(chan struct{})}
	var err error
	if s.group == nil {
		err = s.writeAlone(bw)
		bw.err = err
		s.settle(bw)
	} else if err = s.usable(); err == nil {
		if err = s.group.enqueue(bw); err == nil {
			select {
			case <-bw.done:
				err = bw.err
			case <-ctx.Done():
				select {
				case <-bw.done: // answered meanwhile: the answer, not the cancellation
					err = bw.err
				default:
					return store.WriteResult{}, ctx.Err() // as a call cancelled during its COMMIT: its outcome unknown
				}
			}
		}
	}
	switch {
	case err != nil:
		return store.WriteResult{}, err
	case bw.replay != nil:
		return *bw.replay, nil
	}
	w, row := bw.w, bw.row
	if w.Added == nil {
		return w.Res, nil
	}
	obs := s.observersOf(id, row.Incarnation)
	if len(obs) == 0 {
		return w.Res, nil
	}
	return w.Res, store.Notify(ctx, id, obs, w.Added)
}

// settle follows a write's COMMIT (committed) on the caller's goroutine
// when group commit is off.
func (s *Store) settle(bw *branchWrite) {
	if bw.err == nil && bw.replay == nil {
		s.committed(bw.id, bw.row.Incarnation, bw.w.Commit)
	}
}

// settleAsync follows a write's COMMIT on the group worker that ran it, so
// that a caller that left before its answer does not hold back the
// wake-ups and the publication: the other replicas are woken, and this
// one's subscribers get the commit from its hands when it is the next;
// otherwise the puller reads it (issue 16 review 2: the worker must not
// wait on a read while its group's other callers wait for their answers).
func (s *Store) settleAsync(bw *branchWrite) {
	if bw.err != nil || bw.replay != nil {
		return
	}
	id, inc, c := bw.id, bw.row.Incarnation, bw.w.Commit
	head := c[len(c)-1].Sequence
	s.wake.notify(id, inc, head)
	if h := s.handleOf(id, inc); h != nil && !s.publishNext(h, c) {
		s.wake.pull(id, inc, head)
	}
}

// writeAlone runs bw in a transaction of its own and sets its outcome.
func (s *Store) writeAlone(bw *branchWrite) error {
	return s.inTx(bw.ctx, func(tx pgx.Tx) (err error) {
		if s.group != nil {
			// On a group worker no interceptor recovers a panic (a bug in
			// the rules): it fails this write alone.
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("postgres: panic in a write: %v\n%s", p, debug.Stack())
				}
			}()
		}
		bw.w, bw.replay, bw.row = sqlrow.Written{}, nil, nil // a retried transaction starts afresh
		var (
			row *sqlrow.Branch
			r   any
			ok  bool
		)
		row, r, ok, err = s.lockBranch(bw.ctx, tx, bw.id, bw.op, bw.opts.RequestID)
		if err != nil || ok {
			if ok {
				res := r.(store.WriteResult)
				res.Replayed = true
				bw.replay = &res
			}
			return err
		}
		bw.row = row
		st := newState(bw.ctx, tx, row)
		if bw.w, err = s.plan(st, bw); err != nil {
			return err
		}
		return st.flush()
	})
}

// plan runs a write on its locked row: the head check, its mutation, and
// its events, row and request record queued in st.b.
func (s *Store) plan(st *txState, bw *branchWrite) (sqlrow.Written, error) {
	if err := store.CheckHead(st, bw.opts); err != nil {
		return sqlrow.Written{}, err
	}
	w, err := bw.fn(st)
	if err != nil {
		return sqlrow.Written{}, err
	}
	row := st.Row
	if err := s.commitEvents(st.b, row, w.Commit); err != nil {
		return sqlrow.Written{}, err
	}
	queueUpdateBranch(st.b, row)
	mergeAppend(st.b)
	if err := s.remember(st.b, sqlrow.BranchScope(row.Incarnation), bw.op, bw.opts.RequestID, w.Res); err != nil {
		return sqlrow.Written{}, err
	}
	return w, nil
}

// lockBranch is a write's first round trip: the branch's row locked FOR
// UPDATE and, with a request id, the recall in the scope of its
// incarnation, which runs once the lock is held.
func (s *Store) lockBranch(ctx context.Context, tx pgx.Tx, id uuid.UUID, op store.Op, requestID string) (*sqlrow.Branch, any, bool, error) {
	b := &pgx.Batch{}
	b.Queue(qBranchForUpdate, id)
	if requestID != "" {
		b.Queue(qBranchRequest, id, requestID)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	row, err := scanBranch(br.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	if err != nil || requestID == "" {
		return row, nil, false, err
	}
	r, ok, err := s.recalled(br.QueryRow(), op, requestID)
	if err != nil {
		return nil, nil, false, err
	}
	return row, r, ok, br.Close()
}

// commitEvents queues a commit's events, brings the branch's head to its
// last, and deletes what no replica's log needs any more: the log keeps
// twice the retention (issue 16), so a replica whose subscribers lag the
// head by up to the retention still finds the rows they read; and never
// what this replica's subscribers were told is retained. The delete runs
// only when the head crosses a multiple of trimEvery (a statement a write
// saved on the rest), so between two trims the log holds up to
// trimEvery-1 rows more than twice the retention, never fewer.
func (s *Store) commitEvents(b *pgx.Batch, row *sqlrow.Branch, c store.Commit) error {
	first, last := c[0].Sequence, c[len(c)-1].Sequence
	for i := range c {
		c[i].CommitFirst, c[i].CommitLast = first, last
	}
	if err := insertEvents(b, row.Incarnation, c); err != nil {
		return err
	}
	row.Head = last
	if every := s.trimEvery(); last/every == (first-1)/every {
		return nil
	}
	below := s.sweepBelow(row.ID, row.Incarnation, last)
	if below <= 1 {
		return nil
	}
	b.Queue(qTrimEvents, row.Incarnation, int64(below))
	return nil
}

// trimStep is how many events a branch's log gains between two trims at
// most (issue 16 benchmark: a DELETE on every write was a fifth of its
// statements).
const trimStep = 64

// trimEvery is trimStep, or the retention when that is smaller: the log
// never holds more than three times the retention.
func (s *Store) trimEvery() uint64 {
	return uint64(max(1, min(trimStep, s.cfg.EventRetention)))
}

// queueUpdateBranch queues the write-back of what a write changes of a
// branch's row.
func queueUpdateBranch(b *pgx.Batch, r *sqlrow.Branch) {
	b.Queue(qUpdateBranch, int64(r.Head), int64(r.Epoch), int64(r.SelEpoch), sqlrow.EncodeSelected(r.Selected), optID(r.SystemID), r.NextPos, r.NextRank, r.Count, r.ID)
}

// mergeAppend replaces an append's insert of the message, insert of its
// event and update of the branch, queued in that order first in b, by
// qAppend: one statement for the three.
func mergeAppend(b *pgx.Batch) {
	q := b.QueuedQueries
	if len(q) < 3 || q[0].SQL != qInsertMessage || q[1].SQL != qInsertEvent || q[2].SQL != qUpdateBranch {
		return
	}
	args := make([]any, 0, len(q[0].Arguments)+len(q[1].Arguments)+len(q[2].Arguments))
	args = append(append(append(args, q[0].Arguments...), q[1].Arguments...), q[2].Arguments...)
	merged := &pgx.Batch{}
	merged.Queue(qAppend, args...)
	b.QueuedQueries = append(merged.QueuedQueries, q[3:]...)
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
// of the branch, the factory runs and the message is encoded before the
// transaction, so the branch's row lock is held for the statements only.
func (s *Store) AddMessage(ctx context.Context, id uuid.UUID, in store.AddInput, opts store.WriteOptions) (store.WriteResult, error) {
	pre := sqlrow.Prebuild(in)
	return s.write(ctx, id, store.OpAddMessage, opts, func(st *txState) (sqlrow.Written, error) {
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
		st.b.Queue(qKeepVersions, row.ID, row.Incarnation, optID(row.SystemID))
		st.b.Queue(qClearMessages, row.ID)
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
