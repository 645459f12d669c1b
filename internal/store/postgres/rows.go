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
	"github.com/historyd/historyd/internal/store/rowjson"
)

// The rows of the schema (migrations/postgres/00001_initial.sql) as Go
// values, as the SQLite engine keeps them (its rows.go): ids are uuid
// columns here, JSON is TEXT written by jsonv, so a message read back is
// the message written, byte for byte.

// querier is what a statement runs on: the pool, or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// branchRow is one row of branches.
type branchRow struct {
	id, incarnation uuid.UUID
	createdAt       float64
	metadata        jsonv.Value
	name, user      *string
	parent, fork    *uuid.UUID
	pile, prog      store.ElementID
	head            uint64
	epoch, selEpoch uint64
	selected        *store.Progression
	systemID        *uuid.UUID
	nextPos         int64
	nextRank        int64
	count           int
}

const branchCols = `id, incarnation, created_at, metadata, name, user_name, parent_id, fork_point,
	pile_id, pile_created_at, prog_id, prog_created_at, head, epoch, sel_epoch, selected, system_id,
	next_pos, next_rank, message_count`

// info describes the branch.
func (b *branchRow) info() store.BranchInfo {
	return store.BranchInfo{
		ID: b.id, Incarnation: b.incarnation, CreatedAt: b.createdAt, Metadata: b.metadata,
		Name: b.name, User: b.user, ParentBranchID: b.parent, ForkPoint: b.fork,
		HeadSequence: b.head, MessageCount: b.count, SystemID: b.systemID, Selected: b.selected != nil,
	}
}

// hasSystem reports whether index 0 holds a system.
func (b *branchRow) hasSystem() bool { return b.systemID != nil }

// optID is a nullable uuid argument.
func optID(id *uuid.UUID) any {
	if id == nil {
		return nil
	}
	return *id
}

// scanBranch reads a row of branchCols.
func scanBranch(r pgx.Row) (*branchRow, error) {
	var (
		b         branchRow
		meta      string
		sel       *string
		head      int64
		ep, selEp int64
	)
	err := r.Scan(&b.id, &b.incarnation, &b.createdAt, &meta, &b.name, &b.user, &b.parent, &b.fork,
		&b.pile.ID, &b.pile.CreatedAt, &b.prog.ID, &b.prog.CreatedAt, &head, &ep, &selEp, &sel, &b.systemID,
		&b.nextPos, &b.nextRank, &b.count)
	if err != nil {
		return nil, err
	}
	b.head, b.epoch, b.selEpoch = uint64(head), uint64(ep), uint64(selEp)
	var errs []error
	b.metadata, err = jsonv.ParseDepth([]byte(meta), rowjson.Depth)
	errs = append(errs, err)
	if sel != nil {
		v, err := jsonv.ParseDepth([]byte(*sel), rowjson.Depth)
		errs = append(errs, err)
		if err == nil {
			b.selected, err = store.ParseProgression(v)
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, damagedRowError{fmt.Errorf("branch row: %w", err)}
	}
	return &b, nil
}

// encodeSelected writes the selected progression's column.
func encodeSelected(p *store.Progression) any {
	if p == nil {
		return nil
	}
	return string(jsonv.Marshal(p.Encode(envelope.ModeJSON, "")))
}

// loadBranch reads a branch's row with query (qBranch, or a locking
// variant); a missing one is ErrBranchNotFound.
func loadBranch(ctx context.Context, q querier, query string, id uuid.UUID) (*branchRow, error) {
	b, err := scanBranch(q.QueryRow(ctx, query, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	return b, err
}

// queueInsertBranch queues a new branch's row.
func queueInsertBranch(q *pgx.Batch, b *branchRow) {
	q.Queue(qInsertBranch,
		b.id, b.incarnation, b.createdAt, string(jsonv.Marshal(b.metadata)), b.name, b.user,
		optID(b.parent), optID(b.fork), b.pile.ID, b.pile.CreatedAt, b.prog.ID, b.prog.CreatedAt,
		int64(b.head), int64(b.epoch), int64(b.selEpoch), encodeSelected(b.selected), optID(b.systemID), b.nextPos, b.nextRank, b.count)
}

// msgRow is one row of messages: a current message of a branch.
type msgRow struct {
	msg  *envelope.Message
	body string // msg as stored
	pos  int64  // -1 for the system
	rank int64
	seq  uint64
}

func (m *msgRow) stored() store.StoredMessage {
	return store.StoredMessage{Message: m.msg, Sequence: m.seq}
}

const msgCols = `pos, rank, seq, body`

func scanMsg(r pgx.Row) (*msgRow, error) {
	var (
		m    msgRow
		seq  int64
		body string
	)
	if err := r.Scan(&m.pos, &m.rank, &seq, &body); err != nil {
		return nil, err
	}
	msg, err := decodeMessage(body)
	if err != nil {
		return nil, err
	}
	m.msg, m.body, m.seq = msg, body, uint64(seq)
	return &m, nil
}

// scanMsgs reads every row of msgCols.
func scanMsgs(rows pgx.Rows, err error) ([]*msgRow, error) {
	if err != nil {
		return nil, err
	}
	var out []*msgRow
	err = eachMsg(rows, func(m *msgRow) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachMsg reads rows of msgCols one at a time and hands each to fn, so a
// read that may stop early (ChatInput.Each, ExportInput.Each) decodes no
// row past the one fn refused; fn's error ends it and is returned.
func eachMsg(rows pgx.Rows, fn func(*msgRow) error) error {
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

// encodeMessage writes a message as its stored text: to_dict(mode='json').
func encodeMessage(m *envelope.Message) (string, error) {
	b, err := m.MarshalJSON()
	return string(b), err
}

func decodeMessage(body string) (*envelope.Message, error) {
	v, err := jsonv.ParseDepth([]byte(body), rowjson.Depth)
	if err != nil {
		return nil, damagedRowError{fmt.Errorf("a stored message: %w", err)}
	}
	m, err := envelope.Decode(v)
	if err != nil {
		return nil, damagedRowError{fmt.Errorf("a stored message: %w", err)}
	}
	return m, nil
}

// getMessage reads one current message of a branch; ok is false when it is
// not a member.
func getMessage(ctx context.Context, q querier, branch, id uuid.UUID) (*msgRow, bool, error) {
	m, err := scanMsg(q.QueryRow(ctx, qMessage, branch, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return m, true, nil
}

// index returns a message's position in the full order.
func (b *branchRow) index(pos int64) int {
	if pos < 0 {
		return 0
	}
	if b.hasSystem() {
		return int(pos) + 1
	}
	return int(pos)
}
