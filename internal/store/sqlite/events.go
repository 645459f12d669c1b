package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
)

// The retained event log's rows (docs/design.md#sequences): keyed by the
// branch's incarnation, so a subscriber reading a deleted branch's log
// through BRANCH_DELETED is not disturbed by a new branch of the same id.
// body carries what the event wrote as it wrote it: the message
// (MESSAGE_ADDED, MESSAGE_REPLACED, SYSTEM_SET), the branch and its initial
// messages (BRANCH_CREATED), the progression (PROGRESSION_SET).

// codec reads the JSON this engine stores (internal/store/rowjson).
var codec = rowjson.Codec{
	Name: "sqlite", DecodeMessage: decodeMessage,
	BodyError: func(err error) error { return damagedRowError{err} },
}

// decodeEvent reads an event row's body into ev.
func decodeEvent(ev *store.Event, body sql.NullString) error {
	if !body.Valid {
		return nil
	}
	return codec.DecodeEvent(ev, body.String)
}

// insertEvents writes a commit's events (their sequences, commit bounds
// and indexes set) to the log of incarnation. An event that wrote a
// message keeps no copy of it: it reads the message's current version
// (qEvents) until that version is rewritten or deleted (keepVersion;
// rowjson.EventColumns).
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, incarnation uuid.UUID, c store.Commit) error {
	for _, ev := range c {
		id, body, err := rowjson.EventColumns(ev)
		if err != nil {
			return err
		}
		var msgID any
		if id != nil {
			msgID = blob(*id)
		}
		if _, err := s.wst.exec(ctx, tx, qInsertEvent, blob(incarnation), ev.Sequence, ev.CommitFirst, ev.CommitLast, int(ev.Kind), ev.Index, msgID, body); err != nil {
			return err
		}
	}
	return nil
}

// readEvents reads the events of the branch's incarnation in (after, through], at most
// limit of them, in sequence order.
func (s *Store) readEvents(ctx context.Context, branch, incarnation uuid.UUID, after, through uint64, limit int) ([]store.Event, error) {
	rows, err := s.rst.query(ctx, nil, qEvents, blob(branch), blob(incarnation), after, through, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var (
			ev   store.Event
			kind int
			body sql.NullString
		)
		if err := rows.Scan(&ev.Sequence, &ev.CommitFirst, &ev.CommitLast, &kind, &ev.Index, &body); err != nil {
			return nil, err
		}
		ev.Kind = store.EventKind(kind)
		if rowjson.WroteMessage(ev.Kind) && !body.Valid { // its message is neither in the event nor the current version
			return nil, fmt.Errorf("sqlite: event %d of incarnation %s has lost the message it wrote", ev.Sequence, incarnation)
		}
		if err := decodeEvent(&ev, body); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}
