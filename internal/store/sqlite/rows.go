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
	"github.com/historyd/historyd/internal/store/rowjson"
)

// The rows of the schema (migrations/sqlite/00001_initial.sql) as Go
// values, and their encodings. Ids are 16-byte BLOBs; JSON is TEXT written
// by jsonv, which keeps every member and number literal as it came, so a
// message read back is the message written (ExportBranch after a restart
// is byte-identical).

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
func scanBranch(r scanner) (*branchRow, error) {
	var (
		b                                 branchRow
		id, inc, parent, fork, pile, prog []byte
		sys                               []byte
		meta                              string
		name, user, sel                   sql.NullString
	)
	err := r.Scan(&id, &inc, &b.createdAt, &meta, &name, &user, &parent, &fork,
		&pile, &b.pile.CreatedAt, &prog, &b.prog.CreatedAt, &b.head, &b.epoch, &b.selEpoch, &sel, &sys,
		&b.nextPos, &b.nextRank, &b.count)
	if err != nil {
		return nil, err
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	b.id, err = toUUID(id)
	add(err)
	b.incarnation, err = toUUID(inc)
	add(err)
	b.parent, err = toOptUUID(parent)
	add(err)
	b.fork, err = toOptUUID(fork)
	add(err)
	b.pile.ID, err = toUUID(pile)
	add(err)
	b.prog.ID, err = toUUID(prog)
	add(err)
	b.systemID, err = toOptUUID(sys)
	add(err)
	b.metadata, err = jsonv.ParseDepth([]byte(meta), rowjson.Depth)
	add(err)
	b.name, b.user = toOptString(name), toOptString(user)
	if sel.Valid {
		v, err := jsonv.ParseDepth([]byte(sel.String), rowjson.Depth)
		add(err)
		if err == nil {
			b.selected, err = store.ParseProgression(v)
			add(err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sqlite: branch row: %w", err)
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

// loadBranch reads a branch's row; a missing one is ErrBranchNotFound.
func (s *Store) loadBranch(ctx context.Context, c *stmtCache, tx *sql.Tx, id uuid.UUID) (*branchRow, error) {
	b, err := scanBranch(c.queryRow(ctx, tx, qBranch, blob(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	return b, err
}

// insertBranch writes a new branch's row.
func (s *Store) insertBranch(ctx context.Context, tx *sql.Tx, b *branchRow) error {
	_, err := s.wst.exec(ctx, tx, qInsertBranch,
		blob(b.id), blob(b.incarnation), b.createdAt, string(jsonv.Marshal(b.metadata)), optString(b.name), optString(b.user),
		optBlob(b.parent), optBlob(b.fork), blob(b.pile.ID), b.pile.CreatedAt, blob(b.prog.ID), b.prog.CreatedAt,
		b.head, b.epoch, b.selEpoch, encodeSelected(b.selected), optBlob(b.systemID), b.nextPos, b.nextRank, b.count)
	return err
}

// updateBranch writes back what a write changes of a branch's row.
func (s *Store) updateBranch(ctx context.Context, tx *sql.Tx, b *branchRow) error {
	_, err := s.wst.exec(ctx, tx, qUpdateBranch,
		b.head, b.epoch, b.selEpoch, encodeSelected(b.selected), optBlob(b.systemID), b.nextPos, b.nextRank, b.count, blob(b.id))
	return err
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

func scanMsg(r scanner) (*msgRow, error) {
	var (
		m    msgRow
		body string
	)
	if err := r.Scan(&m.pos, &m.rank, &m.seq, &body); err != nil {
		return nil, err
	}
	msg, err := decodeMessage(body)
	if err != nil {
		return nil, err
	}
	m.msg, m.body = msg, body
	return &m, nil
}

// scanMsgs reads every row of msgCols.
func scanMsgs(rows *sql.Rows, err error) ([]*msgRow, error) {
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
func eachMsg(rows *sql.Rows, fn func(*msgRow) error) error {
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
func (s *Store) getMessage(ctx context.Context, c *stmtCache, tx *sql.Tx, branch, id uuid.UUID) (*msgRow, bool, error) {
	m, err := scanMsg(c.queryRow(ctx, tx, qMessage, blob(branch), blob(id)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
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
