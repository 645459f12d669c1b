package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The rows of the schema (migrations/postgres/00001_initial.sql) read and
// written as the Go values both engines share (internal/store/sqlrow): ids
// are uuid columns here, JSON is TEXT written by jsonv, so a message read
// back is the message written, byte for byte.

// querier is what a statement runs on: the pool, or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const branchCols = `id, incarnation, created_at, metadata, name, user_name, parent_id, fork_point,
	pile_id, pile_created_at, prog_id, prog_created_at, head, epoch, sel_epoch, selected, system_id,
	next_pos, next_rank, message_count`

// optID is a nullable uuid argument.
func optID(id *uuid.UUID) any {
	if id == nil {
		return nil
	}
	return *id
}

// scanBranch reads a row of branchCols.
func scanBranch(r pgx.Row) (*sqlrow.Branch, error) {
	var (
		b         sqlrow.Branch
		meta      string
		sel       *string
		head      int64
		ep, selEp int64
	)
	err := r.Scan(&b.ID, &b.Incarnation, &b.CreatedAt, &meta, &b.Name, &b.User, &b.Parent, &b.Fork,
		&b.Pile.ID, &b.Pile.CreatedAt, &b.Prog.ID, &b.Prog.CreatedAt, &head, &ep, &selEp, &sel, &b.SystemID,
		&b.NextPos, &b.NextRank, &b.Count)
	if err != nil {
		return nil, err
	}
	b.Head, b.Epoch, b.SelEpoch = uint64(head), uint64(ep), uint64(selEp)
	if err := b.DecodeJSON(meta, sel); err != nil {
		return nil, damagedRowError{fmt.Errorf("branch row: %w", err)}
	}
	return &b, nil
}

// loadBranch reads a branch's row with query (qBranch, or a locking
// variant); a missing one is ErrBranchNotFound.
func loadBranch(ctx context.Context, q querier, query string, id uuid.UUID) (*sqlrow.Branch, error) {
	b, err := scanBranch(q.QueryRow(ctx, query, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	return b, err
}

// queueInsertBranch queues a new branch's row.
func queueInsertBranch(q *pgx.Batch, b *sqlrow.Branch) {
	q.Queue(qInsertBranch,
		b.ID, b.Incarnation, b.CreatedAt, string(jsonv.Marshal(b.Metadata)), b.Name, b.User,
		optID(b.Parent), optID(b.Fork), b.Pile.ID, b.Pile.CreatedAt, b.Prog.ID, b.Prog.CreatedAt,
		int64(b.Head), int64(b.Epoch), int64(b.SelEpoch), sqlrow.EncodeSelected(b.Selected), optID(b.SystemID), b.NextPos, b.NextRank, b.Count)
}

const msgCols = `pos, rank, seq, body`

func scanMsg(r pgx.Row) (*sqlrow.Message, error) {
	var (
		m    sqlrow.Message
		seq  int64
		body string
	)
	if err := r.Scan(&m.Pos, &m.Rank, &seq, &body); err != nil {
		return nil, err
	}
	msg, err := decodeMessage(body)
	if err != nil {
		return nil, err
	}
	m.Msg, m.Body, m.Seq = msg, body, uint64(seq)
	return &m, nil
}

// scanMsgs reads every row of msgCols.
func scanMsgs(rows pgx.Rows, err error) ([]*sqlrow.Message, error) {
	if err != nil {
		return nil, err
	}
	return sqlrow.Collect(func(yield func(*sqlrow.Message) error) error { return eachMsg(rows, yield) })
}

// eachMsg reads rows of msgCols one at a time and hands each to fn, so a
// read that may stop early (ChatInput.Each, ExportInput.Each) decodes no
// row past the one fn refused; fn's error ends it and is returned.
func eachMsg(rows pgx.Rows, fn func(*sqlrow.Message) error) error {
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
func getMessage(ctx context.Context, q querier, branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	m, err := scanMsg(q.QueryRow(ctx, qMessage, branch, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return m, true, nil
}
