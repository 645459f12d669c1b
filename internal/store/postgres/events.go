package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	Name: "postgres", DecodeMessage: decodeMessage,
	BodyError: func(err error) error { return damagedRowError{err} },
}

// decodeEvent reads an event row's body into ev.
func decodeEvent(ev *store.Event, body *string) error {
	if body == nil {
		return nil
	}
	return codec.DecodeEvent(ev, *body)
}

// insertEvents writes a commit's events (their sequences, commit bounds
// and indexes set) to the log of incarnation, in one round trip. An event
// that wrote a message keeps no copy of it: it reads the message's current
// version (qEvents) until that version is rewritten or deleted
// (keepVersion; rowjson.EventColumns). They are queued in b, the write's
// batch.
func insertEvents(b *pgx.Batch, incarnation uuid.UUID, c store.Commit) error {
	for _, ev := range c {
		id, body, err := rowjson.EventColumns(ev)
		if err != nil {
			return err
		}
		var msgID any
		if id != nil {
			msgID = *id
		}
		b.Queue(qInsertEvent, incarnation, int64(ev.Sequence), int64(ev.CommitFirst), int64(ev.CommitLast), int(ev.Kind), ev.Index, msgID, body)
	}
	return nil
}

// readEvents reads the events of the branch's incarnation in (after,
// through], at most limit of them, in sequence order, in one statement.
func readEvents(ctx context.Context, q querier, branch, incarnation uuid.UUID, after, through uint64, limit int) ([]store.Event, error) {
	rows, err := q.Query(ctx, qEvents, branch, incarnation, int64(after), int64(through), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var (
			ev                   store.Event
			seq, first, last, ix int64
			kind                 int
			body                 *string
		)
		if err := rows.Scan(&seq, &first, &last, &kind, &ix, &body); err != nil {
			return nil, err
		}
		ev.Sequence, ev.CommitFirst, ev.CommitLast, ev.Index = uint64(seq), uint64(first), uint64(last), int(ix)
		ev.Kind = store.EventKind(kind)
		if rowjson.WroteMessage(ev.Kind) && body == nil { // its message is neither in the event nor the current version
			return nil, damagedRowError{fmt.Errorf("event %d of incarnation %s has lost the message it wrote", ev.Sequence, incarnation)}
		}
		if err := decodeEvent(&ev, body); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}
