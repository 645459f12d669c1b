package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The rows of the schema (migrations/sqlite/00001_initial.sql) read and
// written as the Go values both engines share (internal/store/sqlrow), and
// their encodings. Ids are 16-byte BLOBs; JSON is TEXT written
// by jsonv, which keeps every member and number literal as it came, so a
// message read back is the message written (ExportBranch after a restart
// is byte-identical).

const branchCols = `id, incarnation, created_at, metadata, name, user_name, parent_id, fork_point,
	pile_id, pile_created_at, prog_id, prog_created_at, head, epoch, sel_epoch, selected, system_id,
	next_pos, next_rank, message_count`

func blob(id uuid.UUID) []byte { return id[:] }

func optBlob(id *uuid.UUID) any {
	if id == nil {
		return nil
	}
	return id[:]
}

func optString(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func toUUID(b []byte) (uuid.UUID, error) {
	id, err := uuid.FromBytes(b)
	if err != nil {
		return uuid.UUID{}, damagedRowError{fmt.Errorf("a stored id: %w", err)}
	}
	return id, nil
}

func toOptUUID(b []byte) (*uuid.UUID, error) {
	if b == nil {
		return nil, nil
	}
	id, err := toUUID(b)
	return &id, err
}

func toOptString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// scanBranch reads a row of branchCols.
func scanBranch(r scanner) (*sqlrow.Branch, error) {
	var (
		b                                 sqlrow.Branch
		id, inc, parent, fork, pile, prog []byte
		sys                               []byte
		meta                              string
		name, user, sel                   sql.NullString
	)
	err := r.Scan(&id, &inc, &b.CreatedAt, &meta, &name, &user, &parent, &fork,
		&pile, &b.Pile.CreatedAt, &prog, &b.Prog.CreatedAt, &b.Head, &b.Epoch, &b.SelEpoch, &sel, &sys,
		&b.NextPos, &b.NextRank, &b.Count)
	if err != nil {
		return nil, err
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	b.ID, err = toUUID(id)
	add(err)
	b.Incarnation, err = toUUID(inc)
	add(err)
	b.Parent, err = toOptUUID(parent)
	add(err)
	b.Fork, err = toOptUUID(fork)
	add(err)
	b.Pile.ID, err = toUUID(pile)
	add(err)
	b.Prog.ID, err = toUUID(prog)
	add(err)
	b.SystemID, err = toOptUUID(sys)
	add(err)
	b.Name, b.User = toOptString(name), toOptString(user)
	add(b.DecodeJSON(meta, toOptString(sel)))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sqlite: branch row: %w", err)
	}
	return &b, nil
}

// loadBranch reads a branch's row; a missing one is ErrBranchNotFound.
func (s *Store) loadBranch(ctx context.Context, c *stmtCache, tx *sql.Tx, id uuid.UUID) (*sqlrow.Branch, error) {
	b, err := scanBranch(c.queryRow(ctx, tx, qBranch, blob(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	return b, err
}

// insertBranch writes a new branch's row.
func (s *Store) insertBranch(ctx context.Context, tx *sql.Tx, b *sqlrow.Branch) error {
	_, err := s.wst.exec(ctx, tx, qInsertBranch,
		blob(b.ID), blob(b.Incarnation), b.CreatedAt, string(jsonv.Marshal(b.Metadata)), optString(b.Name), optString(b.User),
		optBlob(b.Parent), optBlob(b.Fork), blob(b.Pile.ID), b.Pile.CreatedAt, blob(b.Prog.ID), b.Prog.CreatedAt,
		b.Head, b.Epoch, b.SelEpoch, sqlrow.EncodeSelected(b.Selected), optBlob(b.SystemID), b.NextPos, b.NextRank, b.Count)
	return err
}

// updateBranch writes back what a write changes of a branch's row.
func (s *Store) updateBranch(ctx context.Context, tx *sql.Tx, b *sqlrow.Branch) error {
	_, err := s.wst.exec(ctx, tx, qUpdateBranch,
		b.Head, b.Epoch, b.SelEpoch, sqlrow.EncodeSelected(b.Selected), optBlob(b.SystemID), b.NextPos, b.NextRank, b.Count, blob(b.ID))
	return err
}

const msgCols = `pos, rank, seq, body`

func scanMsg(r scanner) (*sqlrow.Message, error) {
	var (
		m    sqlrow.Message
		body string
	)
	if err := r.Scan(&m.Pos, &m.Rank, &m.Seq, &body); err != nil {
		return nil, err
	}
	msg, err := decodeMessage(body)
	if err != nil {
		return nil, err
	}
	m.Msg, m.Body = msg, body
	return &m, nil
}

// scanMsgs reads every row of msgCols.
func scanMsgs(rows *sql.Rows, err error) ([]*sqlrow.Message, error) {
	if err != nil {
		return nil, err
	}
	return sqlrow.Collect(func(yield func(*sqlrow.Message) error) error { return eachMsg(rows, yield) })
}

// eachMsg reads rows of msgCols one at a time and hands each to fn, so a
// read that may stop early (ChatInput.Each, ExportInput.Each) decodes no
// row past the one fn refused; fn's error ends it and is returned.
func eachMsg(rows *sql.Rows, fn func(*sqlrow.Message) error) error {
	defer rows.Close()
	for rows.Next() {
		m, err := scanMsg(rows)
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return rows.Err()
}

// decodeMessage reads a message's stored text (sqlrow.DecodeMessage); one
// that does not decode is a damaged row.
func decodeMessage(body string) (*envelope.Message, error) {
	m, err := sqlrow.DecodeMessage(body)
	if err != nil {
		return nil, damagedRowError{err}
	}
	return m, nil
}

// getMessage reads one current message of a branch; ok is false when it is
// not a member.
func (s *Store) getMessage(ctx context.Context, c *stmtCache, tx *sql.Tx, branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	m, err := scanMsg(c.queryRow(ctx, tx, qMessage, blob(branch), blob(id)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return m, true, nil
}
