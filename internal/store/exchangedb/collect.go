package exchangedb

import (
	"context"
	"database/sql"
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// lockChunk bounds the owners one locking statement names (SQLite allows 32,766 variables,
// PostgreSQL 65,535); chunks are taken in id order, so the order stays global.
const lockChunk = 500

// qOutbox reads the outbox being collected, each message by its key in a subquery of its own.
// A join read them the same way only while PostgreSQL had statistics: on tables it had not
// analysed yet (a new deployment's first minute, every fresh schema of the benchmark), its
// generic plan for "tenant = $1" guessed a selective tenant and read every message of the
// tenant through a bitmap of exchange_messages_pkey's first column, for each collect (issue
// 17's benchmark: 850 buffers a collect after 4,000 rounds, and growing). A subquery bound on
// the whole key has no such plan. Args: tenant, the owner, the outbox state.
const qOutbox = `SELECT (SELECT m.body FROM exchange_messages m WHERE m.tenant = l.tenant AND m.id = l.message),
	(SELECT m.known FROM exchange_messages m WHERE m.tenant = l.tenant AND m.id = l.message)
	FROM exchange_ledger l WHERE l.tenant = ? AND l.holder = ? AND l.state = ? ORDER BY l.seq`

// qOutboxSQLite is qOutbox on SQLite, which has no generic plan to fear: the messages joined (one
// descent of exchange_messages' key and one of its table a message, where the two subqueries
// made two of each), in exchange_ledger_by_holder's order (every outbox row has ord 0, so ord,
// seq is seq's order, without the sort of the rows read that "ORDER BY seq" costs). Args as
// qOutbox's.
const qOutboxSQLite = `SELECT m.body, m.known
	FROM exchange_ledger l LEFT JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
	WHERE l.tenant = ? AND l.holder = ? AND l.state = ? ORDER BY l.ord, l.seq`

// outboxQuery is the dialect's query of the outbox being collected.
func (d Dialect) outboxQuery() string {
	if d == SQLite {
		return qOutboxSQLite
	}
	return qOutbox
}

// qOutboxIDs names the messages of an outbox in order: a range of exchange_ledger_by_holder alone
// (the index holds the primary key's message), for outboxCached. Args as qOutbox's.
const qOutboxIDs = `SELECT message FROM exchange_ledger
	WHERE tenant = ? AND holder = ? AND state = ? ORDER BY ord, seq`

// outboxCached reads the outbox being collected on SQLite: its messages' ids from the ledger, each
// message from the sent cache when it is there (sent.go), else from its row.
func (e *Engine) outboxCached(ctx context.Context, q Querier, oid string) ([]outboxRow, error) {
	var (
		batch  []outboxRow
		missed []int // indexes in batch of the messages to read
	)
	err := collect(ctx, q, func(r Rows) error {
		var s string
		if err := r.Scan(&s); err != nil {
			return err
		}
		id, err := parseUUID(s)
		if err != nil {
			return err
		}
		if c, ok := e.sent.take(id); ok {
			batch = append(batch, outboxRow{msg: c.msg, knownUnread: true})
			return nil
		}
		missed = append(missed, len(batch))
		batch = append(batch, outboxRow{id: id})
		return nil
	}, qOutboxIDs, tenant, oid, stOutbox)
	if err != nil || len(missed) == 0 {
		return batch, err
	}
	for _, i := range missed {
		var (
			body  string
			known int64
		)
		err := q.QueryRow(ctx, `SELECT body, known FROM exchange_messages WHERE tenant = ? AND id = ?`, tenant, batch[i].id.String()).Scan(&body, &known)
		switch {
		case q.IsNoRows(err):
			continue // no message: skipped, as qOutbox's join skips it
		case err != nil:
			return nil, err
		}
		if batch[i].msg, err = decodeMessage(body); err != nil {
			return nil, err
		}
		batch[i].known = known != 0
	}
	return slices.DeleteFunc(batch, func(b outboxRow) bool { return b.msg == nil }), nil
}

// outboxRow is one message of the outbox being collected.
type outboxRow struct {
	msg   *envelope.Message
	known bool
	// knownUnread: the message came from the sent cache, and known is to be read (knownAt)
	// if its direct recipient is not registered.
	knownUnread bool
	id          uuid.UUID // outboxCached's, while msg is still to read
}

// knownAt reads whether the direct recipient of message id was a registered owner at its Send.
func knownAt(ctx context.Context, q Querier, id uuid.UUID) (bool, error) {
	var known int64
	err := q.QueryRow(ctx, `SELECT known FROM exchange_messages WHERE tenant = ? AND id = ?`, tenant, id.String()).Scan(&known)
	return known != 0, err
}

// recipientRow is what a collect changes of one recipient owner, written back at its end.
type recipientRow struct {
	reg, nextSeq, nextOrd, landed int64
	nextDead, dead                int64
	// inbox is the collecting owner's inbox at this owner, read with the row's lock (lockOwners);
	// nil when it has none yet (the first delivery creates it).
	inbox *inboxRow
}

type inboxRow struct {
	ord, count     int64
	isNew, changed bool
}

// Collect drains owner's outbox and routes each message as the memory engine does
// (exchange.RouteDirect, exchange.BroadcastDrop), in one transaction: every delivery of the
// outbox is in an inbox or a dead letter when it commits, or still in the outbox if it does not.
//
// Locks (docs/decisions/0019): the owner's collect lock first, then the owner rows of the
// collecting owner and of every recipient, FOR NO KEY UPDATE in id order, before any other row:
// two collects lock the owners they share in the same order, so Collect A delivering to B while
// Collect B delivers to A waits instead of deadlocking. A recipient whose row is gone by then
// (Unregister deletes it, FOR UPDATE) is "recipient left".
func (e *Engine) Collect(ctx context.Context, owner uuid.UUID, o exchange.ReportOptions) (*exchange.Report, error) {
	var (
		rep    *exchange.Report
		landed []uuid.UUID
	)
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		var err error
		rep, landed, err = e.collect(ctx, q, owner, o)
		return err
	}, func() { e.subs.landed(landed) })
	if err != nil {
		return nil, err
	}
	if len(landed) > 0 {
		e.d.Notify(landed)
	}
	return rep, nil
}

func (e *Engine) collect(ctx context.Context, q Querier, owner uuid.UUID, o exchange.ReportOptions) (*exchange.Report, []uuid.UUID, error) {
	oid := owner.String()
	if err := e.collectLock(ctx, q, owner); err != nil {
		return nil, nil, err
	}
	var batch []outboxRow
	if e.sent != nil {
		var err error
		if batch, err = e.outboxCached(ctx, q, oid); err != nil {
			return nil, nil, err
		}
	} else if err := collect(ctx, q, func(r Rows) error {
		var (
			body  nullString
			known sql.NullInt64
		)
		if err := r.Scan(&body, &known); err != nil {
			return err
		}
		if !body.Valid {
			return nil // no message (the join this was skipped it)
		}
		m, err := decodeMessage(body.String)
		if err == nil {
			batch = append(batch, outboxRow{msg: m, known: known.Int64 != 0})
		}
		return err
	}, e.dia.outboxQuery(), tenant, oid, stOutbox); err != nil {
		return nil, nil, err
	}
	rep := &exchange.Report{Owner: owner, Deliveries: make([]exchange.Delivery, 0, len(batch))}
	if len(batch) == 0 {
		// Nothing queued, or not registered (Unregister returned what the outbox held); with
		// messages, the owner's row is locked below, which says it too.
		var one int64
		if err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, oid).Scan(&one); err != nil {
			if q.IsNoRows(err) {
				return nil, nil, ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered)
			}
			return nil, nil, err
		}
		return rep, nil, nil
	}

	// The recipients: the broadcast snapshot (every registered owner, in registration order, one
	// per collect as the memory engine takes it) and the direct UUIDs.
	var others []uuid.UUID
	want := map[uuid.UUID]struct{}{owner: {}}
	for _, b := range batch {
		if b.msg.IsBroadcast() && others == nil {
			others = []uuid.UUID{}
			err := collect(ctx, q, func(r Rows) error {
				var s string
				if err := r.Scan(&s); err != nil {
					return err
				}
				id, err := parseUUID(s)
				if err == nil && id != owner {
					others = append(others, id)
					want[id] = struct{}{}
				}
				return err
			}, `SELECT owner FROM exchange_owners WHERE tenant = ? ORDER BY reg_seq`, tenant)
			if err != nil {
				return nil, nil, err
			}
		}
		if id, ok := b.msg.Recipient.ID(); ok {
			want[id] = struct{}{}
		}
	}
	rows, err := e.lockOwners(ctx, q, want, owner)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := rows[owner]; !ok { // outbox rows without an owner row: Unregister returns them in the same transaction
		return nil, nil, ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered)
	}

	now := e.now().UnixNano()
	var dead []deadRow
	// deliver lands m in to's inbox. A direct message's one delivery takes over its outbox row
	// (moved: one statement instead of an insert and a delete); a broadcast's are rows of their
	// own, and its outbox row is deleted after them.
	deliver := func(m *envelope.Message, to uuid.UUID, moved bool) (bool, exchange.Reason, error) {
		r, ok := rows[to]
		if !ok {
			return false, exchange.ReasonRecipientLeft, nil
		}
		in := r.inbox
		if in == nil {
			// The first delivery from owner creates its inbox after every existing one (ADR-0006
			// D5); the row is written with its count at the end.
			r.nextOrd++
			in = &inboxRow{ord: r.nextOrd, isNew: true}
			r.inbox = in
		}
		if e.set.MaxInbox > 0 && in.count >= int64(e.set.MaxInbox) {
			return false, exchange.ReasonInboxFull, nil
		}
		in.count++
		in.changed = true
		r.nextSeq++
		r.landed++
		var err error
		if moved {
			err = q.Defer(ctx, `UPDATE exchange_ledger SET recipient = ?, state = ?, holder = ?, holder_reg = ?, ord = ?, seq = ?
				WHERE tenant = ? AND message = ? AND recipient = ''`, to.String(), stInbox, to.String(), r.reg, in.ord, r.nextSeq, tenant, m.ID.String())
		} else {
			err = q.Defer(ctx, `INSERT INTO exchange_ledger (tenant, message, recipient, sender, state, holder, holder_reg, ord, seq)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, tenant, m.ID.String(), to.String(), oid, stInbox, to.String(), r.reg, in.ord, r.nextSeq)
		}
		return err == nil, 0, err
	}
	for _, b := range batch {
		d := exchange.Delivery{Message: b.msg}
		moved := false // the outbox row is now the delivery's
		reached := func(to uuid.UUID) {
			d.ReachedCount++
			if o.OwnerIDs {
				d.Reached = append(d.Reached, to)
			}
		}
		if b.msg.IsBroadcast() {
			for _, to := range others {
				ok, reason, err := deliver(b.msg, to, false)
				if err != nil {
					return nil, nil, err
				}
				if ok {
					reached(to)
				} else {
					d.Dropped = append(d.Dropped, exchange.Drop{Recipient: envelope.IDParticipant(to), Reason: reason})
				}
			}
			if d.ReachedCount == 0 && len(d.Dropped) == 0 {
				d.Dropped = append(d.Dropped, exchange.BroadcastDrop())
			}
		} else {
			if id, direct := b.msg.Recipient.ID(); direct && b.knownUnread {
				if _, registered := rows[id]; !registered {
					var err error
					if b.known, err = knownAt(ctx, q, b.msg.ID); q.IsNoRows(err) {
						return nil, nil, damaged("exchangedb: message %s of an outbox has no row", b.msg.ID)
					} else if err != nil {
						return nil, nil, err
					}
				}
			}
			to, ok, reason := exchange.RouteDirect(b.msg.Recipient, func(id uuid.UUID) bool { _, ok := rows[id]; return ok }, b.known)
			if ok {
				var err error
				if ok, reason, err = deliver(b.msg, to, true); err != nil {
					return nil, nil, err
				}
			}
			switch {
			case ok:
				moved = true
				reached(to)
			case reason == exchange.ReasonInboxFull:
				d.Dropped = append(d.Dropped, exchange.Drop{Recipient: envelope.IDParticipant(to), Reason: reason})
			default:
				d.Dropped = append(d.Dropped, exchange.Drop{Recipient: b.msg.Recipient, Reason: reason})
			}
		}
		if d.ReachedCount > 0 {
			rep.Delivered++
		}
		rep.Drops += len(d.Dropped)
		for _, dr := range d.Dropped {
			dead = append(dead, deadRow{msg: b.msg.ID, rcpt: recipientKey(dr.Recipient), reason: dr.Reason})
		}
		if !moved {
			if err := q.Defer(ctx, `DELETE FROM exchange_ledger WHERE tenant = ? AND message = ? AND recipient = ''`, tenant, b.msg.ID.String()); err != nil {
				return nil, nil, err
			}
		}
		rep.Deliveries = append(rep.Deliveries, d)
	}
	if err := e.keepDead(ctx, q, oid, rows[owner], dead, int64(len(batch)), now); err != nil {
		return nil, nil, err
	}
	var landed []uuid.UUID
	for id, r := range rows {
		if r.landed == 0 {
			continue
		}
		landed = append(landed, id)
		if err := q.Defer(ctx, `UPDATE exchange_owners SET next_seq = ?, next_ord = ?, inbox = inbox + ? WHERE tenant = ? AND owner = ?`,
			r.nextSeq, r.nextOrd, r.landed, tenant, id.String()); err != nil {
			return nil, nil, err
		}
		if in := r.inbox; in != nil && in.changed {
			query := `UPDATE exchange_inboxes SET count = ? WHERE tenant = ? AND owner = ? AND sender = ?`
			args := []any{in.count, tenant, id.String(), oid}
			if in.isNew {
				query = `INSERT INTO exchange_inboxes (tenant, owner, sender, ord, count) VALUES (?, ?, ?, ?, ?)`
				args = []any{tenant, id.String(), oid, in.ord, in.count}
			}
			if err := q.Defer(ctx, query, args...); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(dead) > 0 {
		if err := countDeadLettered(ctx, q.Defer, len(dead)); err != nil {
			return nil, nil, err
		}
	}
	slices.SortFunc(landed, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return rep, landed, nil
}

// lockOwners locks the owner rows of ids that exist, in id order (as text, the order the database
// sorts them in), and returns their counters, each with sender's inbox at it, read by
// exchange_inboxes' primary key in the statement that reads the counters: while the owner's row
// is locked, no Pop, Unregister or other collect of sender changes that inbox until the
// transaction ends. A broadcast to 300 owners read them with 300 queries, all while holding the
// owners' locks (review17 R5); a direct collect read its recipient's with a query of its own
// (issue 17's benchmark).
func (e *Engine) lockOwners(ctx context.Context, q Querier, ids map[uuid.UUID]struct{}, sender uuid.UUID) (map[uuid.UUID]*recipientRow, error) {
	keys := make([]string, 0, len(ids))
	for id := range ids {
		keys = append(keys, id.String())
	}
	slices.Sort(keys)
	out := make(map[uuid.UUID]*recipientRow, len(keys))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), lockChunk)]
		keys = keys[len(chunk):]
		where, keyArgs := e.dia.ownerKeys(chunk)
		if lock := e.dia.forNoKeyUpdate(); lock != "" {
			// The locks first, in a statement of their own (led: one round trip with the read).
			// A statement that waits for a row lock reads the row's newest version once it has
			// it, but the rows it joined to it as they were when it started (READ COMMITTED's
			// recheck re-reads only the locked rows): a Pop at that owner committed meanwhile
			// would leave the inbox count read with the lock stale. The read below starts once
			// the locks are held, and nothing changes the inboxes it reads until the commit.
			// It locks too, for an owner registered between the two statements.
			if err := q.Lead(ctx, `SELECT 1 FROM exchange_owners o WHERE `+where+` ORDER BY o.owner`+lock, keyArgs...); err != nil {
				return nil, err
			}
		}
		args := append([]any{sender.String()}, keyArgs...)
		err := collect(ctx, q, func(r Rows) error {
			var (
				s                                  string
				reg, nextSeq, next, nextDead, dead int64
				ord, count                         sql.NullInt64
			)
			if err := r.Scan(&s, &reg, &nextSeq, &next, &nextDead, &dead, &ord, &count); err != nil {
				return err
			}
			id, err := parseUUID(s)
			if err == nil {
				row := &recipientRow{reg: reg, nextSeq: nextSeq, nextOrd: next, nextDead: nextDead, dead: dead}
				if ord.Valid {
					row.inbox = &inboxRow{ord: ord.Int64, count: count.Int64}
				}
				out[id] = row
			}
			return err
		}, `SELECT o.owner, o.reg_seq, o.next_seq, o.next_ord, o.next_dead, o.dead, i.ord, i.count FROM exchange_owners o
			LEFT JOIN exchange_inboxes i ON i.tenant = o.tenant AND i.owner = o.owner AND i.sender = ?
			WHERE `+where+`
			ORDER BY o.owner`+e.dia.forNoKeyUpdateOf("o"), args...)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deadRow is one drop of a collect.
type deadRow struct {
	msg    uuid.UUID
	rcpt   string
	reason exchange.Reason
}

// keepDead keeps the collect's drops as dead letters of holder (whose locked row is row), evicting the oldest past the
// bound (counted), and takes the collected messages off holder's outbox count.
func (e *Engine) keepDead(ctx context.Context, q Querier, holder string, row *recipientRow, dead []deadRow, collected, now int64) error {
	nextDead := row.nextDead
	for _, d := range dead {
		nextDead++
		if err := q.Defer(ctx, `INSERT INTO exchange_ledger (tenant, message, recipient, sender, state, holder, seq, reason, dead_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, tenant, d.msg.String(), d.rcpt, holder, stDead, holder, nextDead, int64(d.reason), now); err != nil {
			return err
		}
	}
	return e.boundDead(ctx, q.Defer, holder, nextDead, row.dead+int64(len(dead)), collected, 0, now)
}

// execFunc runs a statement whose result nothing reads: Querier.Defer, or execNow's when later
// statements of the transaction read what it writes.
type execFunc func(ctx context.Context, query string, args ...any) error

// execNow is q.Exec as an execFunc: the statement runs before the next one (on PostgreSQL,
// Defer's would run with the COMMIT, unseen by the transaction's later reads).
func execNow(q Querier) execFunc {
	return func(ctx context.Context, query string, args ...any) error {
		_, err := q.Exec(ctx, query, args...)
		return err
	}
}

// boundDead evicts holder's oldest dead letters past the bound (counted) and writes holder's
// counters: nextDead is the number of its newest dead letter, held how many it holds with the new
// ones; collected and taken are what left its outbox (a collect) and its inboxes (dead letters of
// max attempts) to make them. Collect's drops and the max-attempts dead letters (sweep.go) are
// bounded alike.
func (e *Engine) boundDead(ctx context.Context, run execFunc, holder string, nextDead, held, collected, taken, now int64) error {
	var evicted int64
	if over := held - int64(e.set.MaxDeadLetters); over > 0 {
		// The kept letters are the last `held` numbers (eviction takes the oldest, Unregister all),
		// so the oldest `over` are exactly those numbered up to nextDead - the bound.
		if err := run(ctx, `UPDATE exchange_ledger SET state = ?, done_at = ? WHERE tenant = ? AND holder = ? AND state = ? AND ord = 0 AND seq <= ?`,
			stEvicted, now, tenant, holder, stDead, nextDead-int64(e.set.MaxDeadLetters)); err != nil {
			return err
		}
		evicted, held = over, held-over
	}
	return run(ctx, `UPDATE exchange_owners SET next_dead = ?, dead = ?, evicted = evicted + ?, queued = queued - ?, inbox = inbox - ? WHERE tenant = ? AND owner = ?`,
		nextDead, held, evicted, collected, taken, tenant, holder)
}

// countDeadLettered adds n to the tenant's count of dead letters ever made (Stats); last in a
// transaction: the tenant's counter row is the one row every dead-lettering transaction shares.
func countDeadLettered(ctx context.Context, run execFunc, n int) error {
	return run(ctx, `INSERT INTO exchange_counters (tenant, name, value) VALUES (?, 'dead_lettered', ?)
		ON CONFLICT (tenant, name) DO UPDATE SET value = exchange_counters.value + ?`, tenant, int64(n), int64(n))
}

// CollectAll collects every owner registered when it starts, in registration order, each in a
// transaction of its own, skipping those unregistered before their turn; it checks ctx before each.
// An owner whose collect fails does not stop the others: one owner's outbox the database cannot
// route (a fault, a damaged row) must not keep everyone else's mail undelivered, as one poisoned
// outbox on PostgreSQL did (docs/decisions/0012 row 24). The first such error is returned once every
// owner has had its turn, with the report of those collected.
func (e *Engine) CollectAll(ctx context.Context, o exchange.ReportOptions) (*exchange.AllReport, error) {
	var owners []uuid.UUID
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		owners = owners[:0]
		return collect(ctx, q, func(r Rows) error {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			id, err := parseUUID(s)
			owners = append(owners, id)
			return err
		}, `SELECT owner FROM exchange_owners WHERE tenant = ? ORDER BY reg_seq`, tenant)
	})
	all := &exchange.AllReport{}
	if err != nil {
		return all, err
	}
	var failed error
	for _, id := range owners {
		if err := ctx.Err(); err != nil {
			return all, err
		}
		rep, err := e.Collect(ctx, id, o)
		switch {
		case isNotRegistered(err):
			continue
		case err != nil:
			if ctx.Err() != nil {
				return all, err
			}
			if failed == nil {
				failed = err
			}
			continue
		}
		all.Delivered += rep.Delivered
		if len(rep.Deliveries) > 0 {
			all.Reports = append(all.Reports, rep)
		}
	}
	return all, failed
}
