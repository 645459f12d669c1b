package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// prepare starts a new branch's row (sqlrow.NewSeed), after checking that
// the id is free (the transaction that writes it checks again), in
// store.Memory's order of checks.
func (s *Store) prepare(ctx context.Context, id uuid.UUID, createdAt *float64, meta jsonv.Value) (*sqlrow.Seed, error) {
	if id == (uuid.UUID{}) {
		id = uuid.New()
	} else if taken, err := s.exists(ctx, id); err != nil || taken {
		if err == nil {
			err = &store.BranchError{Err: store.ErrBranchExists, BranchID: id}
		}
		return nil, err
	}
	return sqlrow.NewSeed(id, createdAt, meta)
}

// firstOr is store.FirstIfRaced over the records, read on the read pool.
func (s *Store) firstOr(ctx context.Context, err error, principal string, op store.Op, requestID string) (store.BranchResult, error) {
	return store.FirstIfRaced(err, requestID, func() (store.BranchResult, bool, error) {
		return s.recallCreatedRead(ctx, principal, op, requestID)
	})
}

// recallCreatedRead is recallCreated on the read pool, outside any
// transaction: s.read does not sort its error, so it is sorted here (a
// damaged or unreadable file is DATA_LOSS or UNAVAILABLE and reaches the
// store's health, not INTERNAL).
func (s *Store) recallCreatedRead(ctx context.Context, principal string, op store.Op, requestID string) (store.BranchResult, bool, error) {
	r, ok, err := s.recallCreated(ctx, &s.rst, nil, principal, op, requestID)
	return r, ok, s.fault(err)
}

// exists reports whether a branch id is taken, on the read pool (its error
// sorted as recallCreatedRead's).
func (s *Store) exists(ctx context.Context, id uuid.UUID) (bool, error) {
	var one int
	err := s.rst.queryRow(ctx, nil, qBranchExists, blob(id)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, s.fault(err)
}

// recallCreated returns a remembered result of a principal's
// branch-creating calls, marked as replayed.
func (s *Store) recallCreated(ctx context.Context, c *stmtCache, tx *sql.Tx, principal string, op store.Op, requestID string) (store.BranchResult, bool, error) {
	r, ok, err := s.recall(ctx, c, tx, sqlrow.CreatorScope(principal), op, requestID)
	if err != nil || !ok {
		return store.BranchResult{}, false, err
	}
	res := r.(store.BranchResult)
	res.Replayed = true
	return res, true, nil
}

// publishNew writes a built branch in one transaction: a repeat of the
// request id returns the first result instead, and an id taken in the
// meantime is ErrBranchExists. The branch's BRANCH_CREATED is sequence 1;
// the deletes remembered for an earlier branch of its id are forgotten
// (issue 13 item 13), as store.Memory's register does.
func (s *Store) publishNew(ctx context.Context, b *sqlrow.Seed, op store.Op, principal, requestID string) (store.BranchResult, error) {
	nb := b.Finish()
	row := nb.Row
	var first *store.BranchResult
	err := s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		first = nil // a re-run of the batch starts afresh (writer.do)
		if r, ok, err := s.recallCreated(ctx, &s.wst, tx, principal, op, requestID); err != nil || ok {
			first = &r
			return err
		}
		var one int
		switch err := s.wst.queryRow(ctx, tx, qBranchExists, blob(row.ID)).Scan(&one); {
		case err == nil:
			return &store.BranchError{Err: store.ErrBranchExists, BranchID: row.ID}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := s.insertBranch(ctx, tx, row); err != nil {
			return err
		}
		st := s.state(ctx, tx, row)
		if err := nb.InsertMessages(st.insert); err != nil {
			return err
		}
		if err := s.insertEvents(ctx, tx, row.Incarnation, nb.Commit); err != nil {
			return err
		}
		if err := s.forgetScope(ctx, tx, sqlrow.DeleteScope(row.ID)); err != nil {
			return err
		}
		return s.remember(ctx, tx, sqlrow.CreatorScope(principal), op, requestID, nb.Kept, nil)
	}, nil)
	switch {
	case err != nil:
		return store.BranchResult{}, err
	case first != nil:
		return *first, nil
	}
	return nb.Result, nil
}

// CreateBranch creates a branch (store.Store), as store.Memory does: the
// messages with D3's add-or-replace rule, then the system through the
// factory, then a pre-built system with set_system (store.CreateSeeds).
func (s *Store) CreateBranch(ctx context.Context, in store.CreateBranchInput) (store.BranchResult, error) {
	if r, ok, err := s.recallCreatedRead(ctx, in.Principal, store.OpCreateBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	if err := store.CheckCreate(in); err != nil {
		return store.BranchResult{}, err
	}
	b, err := s.prepare(ctx, in.ID, in.CreatedAt, in.Metadata)
	if err != nil {
		return s.firstOr(ctx, err, in.Principal, store.OpCreateBranch, in.RequestID)
	}
	if err := b.Create(in); err != nil {
		return store.BranchResult{}, err
	}
	return s.publishNew(ctx, b, store.OpCreateBranch, in.Principal, in.RequestID)
}

// ImportBranch creates a branch from LionAGI JSON (store.Store).
func (s *Store) ImportBranch(ctx context.Context, in store.ImportInput) (store.BranchResult, error) {
	if r, ok, err := s.recallCreatedRead(ctx, in.Principal, store.OpImportBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	im, err := store.ParseImport(in.Data, in.DBMetaKey)
	if err != nil {
		return store.BranchResult{}, err
	}
	b, err := s.prepare(ctx, in.BranchID(im.ID), im.CreatedAt, im.Metadata)
	if err != nil {
		return s.firstOr(ctx, err, in.Principal, store.OpImportBranch, in.RequestID)
	}
	if err := b.Import(im); err != nil {
		return store.BranchResult{}, err
	}
	return s.publishNew(ctx, b, store.OpImportBranch, in.Principal, in.RequestID)
}

// ForkBranch copies a branch up to and including a message (store.Store;
// store.Memory's ForkBranch, over a read of the source).
func (s *Store) ForkBranch(ctx context.Context, in store.ForkInput) (store.BranchResult, error) {
	if r, ok, err := s.recallCreatedRead(ctx, in.Principal, store.OpForkBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	if err := store.CheckFork(in); err != nil { // before the source is read, as store.Memory checks
		return store.BranchResult{}, err
	}
	var (
		src  *sqlrow.Branch
		msgs []*envelope.Message
	)
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		if src, err = s.loadBranch(ctx, &s.rst, tx, in.Source); err != nil {
			return err
		}
		through, err := sqlrow.ForkThrough(src, in, func(id uuid.UUID) (*sqlrow.Message, bool, error) {
			return s.getMessage(ctx, &s.rst, tx, src.ID, id)
		})
		if err != nil {
			return err
		}
		rows, err := scanMsgs(s.rst.query(ctx, tx, qMessagesThrough, blob(src.ID), through))
		if err != nil {
			return err
		}
		msgs = sqlrow.Messages(rows)
		return nil
	})
	if err != nil {
		return store.BranchResult{}, err
	}
	copies, sel, err := sqlrow.ForkCopies(src, msgs)
	if err != nil {
		return store.BranchResult{}, err
	}
	b, err := s.prepare(ctx, in.ID, nil, src.Metadata)
	if err != nil {
		return s.firstOr(ctx, err, in.Principal, store.OpForkBranch, in.RequestID)
	}
	if err := b.Fork(src, in, copies, sel); err != nil {
		return store.BranchResult{}, err
	}
	return s.publishNew(ctx, b, store.OpForkBranch, in.Principal, in.RequestID)
}

// DeleteBranch deletes a branch (store.Store): BRANCH_DELETED is its last
// event and ends its subscriptions; its messages, row and the records of
// its writes go in the same transaction; its request id is remembered
// under the branch id. The deleted incarnation's events stay until no
// subscription reads them (handles.go); a branch no one watches has its
// events deleted with it (deleteUnwatched).
func (s *Store) DeleteBranch(ctx context.Context, id uuid.UUID, opts store.WriteOptions) (store.DeleteResult, error) {
	scope := sqlrow.DeleteScope(id)
	var (
		res     store.DeleteResult
		replay  bool
		watched bool
		row     *sqlrow.Branch
		c       store.Commit
	)
	err := s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, replay, watched, row, c = store.DeleteResult{}, false, false, nil, nil // a re-run of the batch starts afresh (writer.do)
		if r, ok, err := s.recall(ctx, &s.wst, tx, scope, store.OpDeleteBranch, opts.RequestID); err != nil || ok {
			if ok {
				res, replay = r.(store.DeleteResult), true
				res.Replayed = true
			}
			return err
		}
		var err error
		if row, err = s.writerRow(ctx, tx, id); err != nil {
			return err
		}
		delete(s.rows, id)
		if err := store.CheckHead(s.state(ctx, tx, row), opts); err != nil {
			return err
		}
		c = store.Commit{sqlrow.NextEvent(row, nil, store.EventBranchDeleted)}
		if watched = s.watched(id); watched {
			if err := s.deleteWatched(ctx, tx, row, c); err != nil {
				return err
			}
		} else if err := s.deleteUnwatched(ctx, tx, row, c); err != nil {
			return err
		}
		res = store.DeleteResult{BranchID: id, LastSequence: row.Head}
		return s.remember(ctx, tx, scope, store.OpDeleteBranch, opts.RequestID, res, nil)
	}, func() {
		if replay || !watched {
			return
		}
		s.mu.Lock()
		h := s.handles[id]
		s.mu.Unlock()
		s.publish(id, row.Incarnation, c)
		if h == nil || h.incarnation != row.Incarnation || h.log.frozen.Load() == 0 {
			s.sweep(row.Incarnation) // no subscription reads the deleted log
		}
	})
	if err != nil {
		return store.DeleteResult{}, err
	}
	return res, nil
}

// watched reports whether the branch has a handle, or one is being made
// in the batch being written (writer goroutine): a subscription may read
// its log.
func (s *Store) watched(id uuid.UUID) bool {
	if s.pinning[id] > 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handles[id] != nil
}

// deleteWatched deletes a branch whose log a subscription may still read:
// the delete's event is logged, the log's events keep the message versions
// they refer to, and the janitor deletes the log once no one reads it
// (handles.go).
func (s *Store) deleteWatched(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch, c store.Commit) error {
	if err := s.commitEvents(ctx, tx, row, c); err != nil {
		return err
	}
	if _, err := s.wst.exec(ctx, tx, qKeepVersions, blob(row.ID), blob(row.Incarnation), nil); err != nil {
		return err
	}
	if err := s.deleteRows(ctx, tx, row); err != nil {
		return err
	}
	_, err := s.wst.exec(ctx, tx, qMarkDead, deadMark(row.Incarnation))
	return err
}

// deleteUnwatched deletes a branch no subscription reads, its log with
// it, and writes nothing first: so it frees space without needing any,
// and deleting a branch makes room on a full disk or a database at
// --max-db-bytes (issue 15).
func (s *Store) deleteUnwatched(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch, c store.Commit) error {
	if err := s.deleteRows(ctx, tx, row); err != nil {
		return err
	}
	row.Head = c[len(c)-1].Sequence
	_, err := s.wst.exec(ctx, tx, qDeleteEvents, blob(row.Incarnation))
	return err
}

// deleteRows deletes a branch's messages, its row and its request records.
func (s *Store) deleteRows(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch) error {
	for _, q := range []string{qDeleteMessages, qDeleteBranch} {
		if _, err := s.wst.exec(ctx, tx, q, blob(row.ID)); err != nil {
			return err
		}
	}
	return s.forgetScope(ctx, tx, sqlrow.BranchScope(row.Incarnation))
}
