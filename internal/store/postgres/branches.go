package postgres

import (
	"context"
	"errors"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// prepare starts a new branch's row (sqlrow.NewSeed), after checking that
// the id is free (the insert checks again: a unique violation), in
// store.Memory's order of checks.
func prepare(ctx context.Context, q querier, id uuid.UUID, createdAt *float64, meta jsonv.Value) (*sqlrow.Seed, error) {
	if id == (uuid.UUID{}) {
		id = uuid.New()
	} else if taken, err := exists(ctx, q, id); err != nil || taken {
		if err == nil {
			err = &store.BranchError{Err: store.ErrBranchExists, BranchID: id}
		}
		return nil, err
	}
	return sqlrow.NewSeed(id, createdAt, meta)
}

func exists(ctx context.Context, q querier, id uuid.UUID) (bool, error) {
	var one int
	err := q.QueryRow(ctx, qBranchExists, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// firstOr is store.FirstIfRaced over the records (a first attempt's row and record commit
// together), its error sorted by fault. ForkBranch needs none: its id check runs after the
// repeat check, in publishNew's transaction.
func (s *Store) firstOr(ctx context.Context, err error, principal string, op store.Op, requestID string) (store.BranchResult, error) {
	r, err := store.FirstIfRaced(err, requestID, func() (store.BranchResult, bool, error) {
		return s.recallCreated(ctx, s.pool, principal, op, requestID)
	})
	return r, s.fault(ctx, err)
}

// recallCreated returns a remembered result of a principal's
// branch-creating calls, marked as replayed.
func (s *Store) recallCreated(ctx context.Context, q querier, principal string, op store.Op, requestID string) (store.BranchResult, bool, error) {
	r, ok, err := s.recall(ctx, q, sqlrow.CreatorScope(principal), op, requestID)
	if err != nil || !ok {
		return store.BranchResult{}, false, err
	}
	res := r.(store.BranchResult)
	res.Replayed = true
	return res, true, nil
}

// publishNew writes a new branch in one transaction: with a request id,
// the advisory lock of the principal's scope and that id first (so the
// same id sent to two replicas at once writes once), then the repeat
// check; then build, when given, makes the branch inside the transaction
// (a fork, from its source's rows); an id taken in the meantime is
// ErrBranchExists. The branch's BRANCH_CREATED is sequence 1; the deletes
// remembered for an earlier branch of its id are forgotten (issue 13 item
// 13), as store.Memory's register does.
func (s *Store) publishNew(ctx context.Context, b *sqlrow.Seed, build func(tx pgx.Tx) (*sqlrow.Seed, error), op store.Op, principal, requestID string) (store.BranchResult, error) {
	var (
		res   store.BranchResult
		first *store.BranchResult
	)
	scope := sqlrow.CreatorScope(principal)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		first, res = nil, store.BranchResult{} // a retried transaction starts afresh
		if requestID != "" {
			if _, err := tx.Exec(ctx, qCreateLock, lockKey(scope, requestID)); err != nil {
				return err
			}
			if r, ok, err := s.recallCreated(ctx, tx, principal, op, requestID); err != nil || ok {
				first = &r
				return err
			}
		}
		seed := b
		if build != nil {
			var err error
			if seed, err = build(tx); err != nil {
				return err
			}
		}
		nb := seed.Finish()
		row := nb.Row
		res = nb.Result
		st := newState(ctx, tx, row)
		queueInsertBranch(st.b, row)
		if err := nb.InsertMessages(st.insert); err != nil {
			return err
		}
		if err := insertEvents(st.b, row.Incarnation, nb.Commit); err != nil {
			return err
		}
		forgetScope(st.b, sqlrow.DeleteScope(row.ID))
		if err := s.remember(st.b, scope, op, requestID, nb.Kept); err != nil {
			return err
		}
		// Sent now, not with the COMMIT (flush): a branch id taken
		// meanwhile must be told from other failures here.
		err := tx.SendBatch(ctx, st.b).Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "branches_pkey" {
			return &store.BranchError{Err: store.ErrBranchExists, BranchID: row.ID}
		}
		return err
	})
	switch {
	case err != nil:
		return store.BranchResult{}, err
	case first != nil:
		return *first, nil
	}
	return res, nil
}

// CreateBranch creates a branch (store.Store), as store.Memory does: the
// messages with D3's add-or-replace rule, then the system through the
// factory, then a pre-built system with set_system (store.CreateSeeds).
func (s *Store) CreateBranch(ctx context.Context, in store.CreateBranchInput) (store.BranchResult, error) {
	if err := s.usable(); err != nil {
		return store.BranchResult{}, err
	}
	if r, ok, err := s.recallCreated(ctx, s.pool, in.Principal, store.OpCreateBranch, in.RequestID); err != nil || ok {
		return r, s.fault(ctx, err)
	}
	if err := store.CheckCreate(in); err != nil {
		return store.BranchResult{}, err
	}
	b, err := prepare(ctx, s.pool, in.ID, in.CreatedAt, in.Metadata)
	if err != nil {
		return s.firstOr(ctx, err, in.Principal, store.OpCreateBranch, in.RequestID)
	}
	if err := b.Create(in); err != nil {
		return store.BranchResult{}, err
	}
	return s.publishNew(ctx, b, nil, store.OpCreateBranch, in.Principal, in.RequestID)
}

// ImportBranch creates a branch from LionAGI JSON (store.Store).
func (s *Store) ImportBranch(ctx context.Context, in store.ImportInput) (store.BranchResult, error) {
	if err := s.usable(); err != nil {
		return store.BranchResult{}, err
	}
	if r, ok, err := s.recallCreated(ctx, s.pool, in.Principal, store.OpImportBranch, in.RequestID); err != nil || ok {
		return r, s.fault(ctx, err)
	}
	im, err := store.ParseImport(in.Data, in.DBMetaKey)
	if err != nil {
		return store.BranchResult{}, err
	}
	b, err := prepare(ctx, s.pool, in.BranchID(im.ID), im.CreatedAt, im.Metadata)
	if err != nil {
		return s.firstOr(ctx, err, in.Principal, store.OpImportBranch, in.RequestID)
	}
	if err := b.Import(im); err != nil {
		return store.BranchResult{}, err
	}
	return s.publishNew(ctx, b, nil, store.OpImportBranch, in.Principal, in.RequestID)
}

// ForkBranch copies a branch up to and including a message (store.Store;
// store.Memory's ForkBranch). The source's row is held FOR SHARE in the
// transaction that writes the copy, so no write lands between the read
// and the copy.
func (s *Store) ForkBranch(ctx context.Context, in store.ForkInput) (store.BranchResult, error) {
	if err := s.usable(); err != nil {
		return store.BranchResult{}, err
	}
	if r, ok, err := s.recallCreated(ctx, s.pool, in.Principal, store.OpForkBranch, in.RequestID); err != nil || ok {
		return r, s.fault(ctx, err)
	}
	if err := store.CheckFork(in); err != nil { // before the source is read, as store.Memory checks
		return store.BranchResult{}, err
	}
	build := func(tx pgx.Tx) (*sqlrow.Seed, error) {
		src, err := loadBranch(ctx, tx, qBranchForShare, in.Source)
		if err != nil {
			return nil, err
		}
		through, err := sqlrow.ForkThrough(src, in, func(id uuid.UUID) (*sqlrow.Message, bool, error) {
			return getMessage(ctx, tx, src.ID, id)
		})
		if err != nil {
			return nil, err
		}
		rows, err := scanMsgs(tx.Query(ctx, qMessagesThrough, src.ID, through))
		if err != nil {
			return nil, err
		}
		copies, sel, err := sqlrow.ForkCopies(src, sqlrow.Messages(rows))
		if err != nil {
			return nil, err
		}
		b, err := prepare(ctx, tx, in.ID, nil, src.Metadata)
		if err != nil {
			return nil, err
		}
		if err := b.Fork(src, in, copies, sel); err != nil {
			return nil, err
		}
		return b, nil
	}
	return s.publishNew(ctx, nil, build, store.OpForkBranch, in.Principal, in.RequestID)
}

// DeleteBranch deletes a branch (store.Store): BRANCH_DELETED is its last
// event and ends its subscriptions, on every replica; its messages, row
// and the records of its writes go in the same transaction; its request
// id is remembered under the branch id. The deleted incarnation's events
// stay, marked dead with the time, so every replica's subscribers read
// through BRANCH_DELETED; a janitor deletes them past deadGrace.
func (s *Store) DeleteBranch(ctx context.Context, id uuid.UUID, opts store.WriteOptions) (store.DeleteResult, error) {
	scope := sqlrow.DeleteScope(id)
	var (
		res    store.DeleteResult
		replay bool
		row    *sqlrow.Branch
		c      store.Commit
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res, replay, row, c = store.DeleteResult{}, false, nil, nil // a retried transaction starts afresh
		var err error
		// The row lock first, as every write of the branch: a delete and
		// a repeat of it on another replica are ordered by it.
		row, err = loadBranch(ctx, tx, qBranchForUpdate, id)
		var be *store.BranchError
		if errors.As(err, &be) && opts.RequestID != "" {
			// Gone: a repeat of the delete that removed it answers as it did.
			if r, ok, rerr := s.recall(ctx, tx, scope, store.OpDeleteBranch, opts.RequestID); rerr != nil || ok {
				if ok {
					res, replay = r.(store.DeleteResult), true
					res.Replayed = true
				}
				return rerr
			}
		}
		if err != nil {
			return err
		}
		if r, ok, err := s.recall(ctx, tx, scope, store.OpDeleteBranch, opts.RequestID); err != nil || ok {
			if ok {
				res, replay = r.(store.DeleteResult), true
				res.Replayed = true
			}
			return err
		}
		st := newState(ctx, tx, row)
		if err := store.CheckHead(st, opts); err != nil {
			return err
		}
		c = store.Commit{sqlrow.NextEvent(row, nil, store.EventBranchDeleted)}
		if err := s.commitEvents(st.b, row, c); err != nil {
			return err
		}
		st.b.Queue(qKeepVersions, row.ID, row.Incarnation, nil)
		st.b.Queue(qDeleteMessages, row.ID)
		st.b.Queue(qDeleteBranch, row.ID)
		forgetScope(st.b, sqlrow.BranchScope(row.Incarnation))
		st.b.Queue(qMarkDead, deadMark(row.Incarnation), strconv.FormatInt(s.now().UnixNano(), 10))
		res = store.DeleteResult{BranchID: id, LastSequence: row.Head}
		if err := s.remember(st.b, scope, store.OpDeleteBranch, opts.RequestID, res); err != nil {
			return err
		}
		return st.flush()
	})
	if err != nil {
		return store.DeleteResult{}, err
	}
	if !replay {
		s.committed(id, row.Incarnation, c)
	}
	return res, nil
}
