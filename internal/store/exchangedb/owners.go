package exchangedb

import (
	"context"
	"database/sql"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// Register creates owner's flow with an empty outbox (ErrOwnerAlreadyRegistered if it exists).
// The registration number comes from the tenant's counter row, so Owners pages in registration
// order across replicas. The lease settings (at most one; zero fields: the Exchange's defaults)
// are stored resolved, so a restart with other defaults keeps them.
func (e *Engine) Register(ctx context.Context, owner uuid.UUID, settings ...exchange.OwnerSettings) (*exchange.Snapshot, error) {
	set := exchange.RegisterSettings(settings, e.set)
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		// An owner registered already is told so before anything is written (SQLite runs the
		// Exchange's writes without a savepoint: a refusal after the counter's update would roll
		// back the writes batched with it, which then run again). The insert below still decides
		// between two registrations at once (PostgreSQL, which skips the check: its refusal
		// rolls back its own transaction alone, and the check would be a round trip more).
		if e.dia != Postgres {
			var one int64
			switch err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, owner.String()).Scan(&one); {
			case err == nil:
				return ownerErr("Owner", owner, exchange.ErrOwnerAlreadyRegistered)
			case !q.IsNoRows(err):
				return err
			}
		}
		var reg int64
		if err := q.QueryRow(ctx, `INSERT INTO exchange_counters (tenant, name, value) VALUES (?, 'reg', 1)
			ON CONFLICT (tenant, name) DO UPDATE SET value = exchange_counters.value + 1 RETURNING value`, tenant).Scan(&reg); err != nil {
			return err
		}
		n, err := q.Exec(ctx, `INSERT INTO exchange_owners (tenant, owner, reg_seq, max_attempts, visibility_ns) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (tenant, owner) DO NOTHING`, tenant, owner.String(), reg, int64(set.MaxAttempts), set.Visibility.Nanoseconds())
		if err != nil {
			return err
		}
		if n == 0 {
			return ownerErr("Owner", owner, exchange.ErrOwnerAlreadyRegistered)
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &exchange.Snapshot{Owner: owner, Outbox: []*envelope.Message{}}, nil
}

// UnregisterIf removes owner if check, given what it holds, returns nil, and returns that; an
// error from check is returned and nothing is removed (the transaction rolls back). The owner's
// row is locked first (FOR UPDATE), after the collect lock: a collect of owner in progress
// finishes first, and no delivery, send or pop changes the flow between the snapshot, the check
// and the removal. Deliveries that come after find no row and are dead letters "recipient left";
// the empty inboxes owner filled at other owners are reclaimed in the same transaction. Expired
// last-attempt leases are swept first (sweep.go), so the snapshot returns their dead letters,
// numbered above its NoticedAfter;
// the leased messages are returned with the rest of the inboxes and their leases end (a later
// Ack finds no owner, or, once it registers again, a returned row: stale).
func (e *Engine) UnregisterIf(ctx context.Context, owner uuid.UUID, check func(*exchange.Snapshot) error) (*exchange.Snapshot, bool, error) {
	var (
		snap *exchange.Snapshot
		ok   bool
	)
	id := owner.String()
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		snap, ok = nil, false
		if err := e.collectLock(ctx, q, owner); err != nil {
			return err
		}
		now := e.now().UnixNano()
		found, deadBefore, err := e.lockOwnerSwept(ctx, q, id, e.dia.forUpdate(), now)
		if !found || err != nil {
			return err
		}
		s, found, err := e.snapshot(ctx, q, owner)
		if err != nil || !found {
			return err
		}
		s.NoticedAfter = deadBefore
		if check != nil {
			if err := check(s); err != nil {
				return err
			}
		}
		if err := q.Defer(ctx, `DELETE FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, id); err != nil {
			return err
		}
		if err := q.Defer(ctx, `UPDATE exchange_ledger SET state = ?, done_at = ?, held = 0, visible_at = 0
			WHERE tenant = ? AND holder = ? AND state IN (?, ?, ?)`, stReturned, now, tenant, id, stOutbox, stInbox, stDead); err != nil {
			return err
		}
		if err := q.Defer(ctx, `DELETE FROM exchange_inboxes WHERE tenant = ? AND owner = ?`, tenant, id); err != nil {
			return err
		}
		// Its inboxes at other owners that are empty are reclaimed now; the others when the Pop
		// that empties them sees the sender gone (receive.go).
		if err := q.Defer(ctx, `DELETE FROM exchange_inboxes WHERE tenant = ? AND sender = ? AND count = 0`, tenant, id); err != nil {
			return err
		}
		snap, ok = s, true
		return nil
	}, func() {
		if ok {
			e.subs.left(owner)
		}
	})
	if err != nil {
		return nil, false, err
	}
	if ok {
		e.d.Notify([]uuid.UUID{owner})
	}
	return snap, ok, nil
}

// collectLock takes the per-owner collect lock (PostgreSQL; SQLite's single writer is one). It is
// led in front of the transaction's next statement (one round trip for both), which runs once the
// lock is held.
func (e *Engine) collectLock(ctx context.Context, q Querier, owner uuid.UUID) error {
	stmt := e.dia.collectLock()
	if stmt == "" {
		return nil
	}
	return q.Lead(ctx, stmt, tenant, owner.String())
}

// Get returns what owner holds, false when it is not registered. Expired last-attempt leases are
// swept first (sweep.go).
func (e *Engine) Get(ctx context.Context, owner uuid.UUID) (*exchange.Snapshot, bool, error) {
	var (
		snap *exchange.Snapshot
		ok   bool
	)
	err := e.readSwept(ctx, owner, func(ctx context.Context, q Querier) error {
		var err error
		snap, ok, err = e.snapshot(ctx, q, owner)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return snap, ok, nil
}

// snapshot reads what owner's flow holds: the outbox, the inboxes in creation order (empty ones
// included), the dead letters and the eviction count.
func (e *Engine) snapshot(ctx context.Context, q Querier, owner uuid.UUID) (*exchange.Snapshot, bool, error) {
	id := owner.String()
	var evicted int64
	if err := q.QueryRow(ctx, `SELECT evicted FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, id).Scan(&evicted); err != nil {
		if q.IsNoRows(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	s := &exchange.Snapshot{Owner: owner, Outbox: []*envelope.Message{}, DeadLettersEvicted: uint64(evicted)}
	err := collect(ctx, q, func(r Rows) error {
		var body string
		if err := r.Scan(&body); err != nil {
			return err
		}
		m, err := decodeMessage(body)
		if err == nil {
			s.Outbox = append(s.Outbox, m)
		}
		return err
	}, `SELECT m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
		WHERE l.tenant = ? AND l.holder = ? AND l.state = ? ORDER BY l.seq`, tenant, id, stOutbox)
	if err != nil {
		return nil, false, err
	}
	byOrd := map[int64]int{}
	err = collect(ctx, q, func(r Rows) error {
		var (
			sender string
			ord    int64
		)
		if err := r.Scan(&sender, &ord); err != nil {
			return err
		}
		sid, err := parseUUID(sender)
		if err != nil {
			return err
		}
		byOrd[ord] = len(s.Inboxes)
		s.Inboxes = append(s.Inboxes, exchange.Inbox{Sender: sid, Messages: []*envelope.Message{}})
		return nil
	}, `SELECT sender, ord FROM exchange_inboxes WHERE tenant = ? AND owner = ? ORDER BY ord`, tenant, id)
	if err != nil {
		return nil, false, err
	}
	err = collect(ctx, q, func(r Rows) error {
		var (
			ord  int64
			body string
		)
		if err := r.Scan(&ord, &body); err != nil {
			return err
		}
		m, err := decodeMessage(body)
		if err != nil {
			return err
		}
		if i, ok := byOrd[ord]; ok {
			s.Inboxes[i].Messages = append(s.Inboxes[i].Messages, m)
		}
		return nil
	}, `SELECT l.ord, m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
		WHERE l.tenant = ? AND l.holder = ? AND l.state = ? ORDER BY l.ord, l.seq`, tenant, id, stInbox)
	if err != nil {
		return nil, false, err
	}
	s.DeadLetters, _, err = e.deadLetters(ctx, q, id, 0, 0)
	if err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// deadLetters reads up to limit of holder's dead letters after the cursor (limit <= 0: all).
func (e *Engine) deadLetters(ctx context.Context, q Querier, holder string, after uint64, limit int) ([]exchange.DeadLetter, bool, error) {
	query := `SELECT l.seq, l.recipient, l.reason, l.dead_at, l.attempts, m.body FROM exchange_ledger l
		JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
		WHERE l.tenant = ? AND l.holder = ? AND l.state = ? AND l.ord = 0 AND l.seq > ? ORDER BY l.seq`
	args := []any{tenant, holder, stDead, int64(after)}
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, int64(limit)+1)
	}
	var out []exchange.DeadLetter
	err := collect(ctx, q, func(r Rows) error {
		var (
			seq, reason, at, attempts int64
			rcpt, body                string
		)
		if err := r.Scan(&seq, &rcpt, &reason, &at, &attempts, &body); err != nil {
			return err
		}
		m, err := decodeMessage(body)
		if err != nil {
			return err
		}
		rs := exchange.Reason(reason)
		out = append(out, exchange.DeadLetter{Seq: uint64(seq), Message: m, Recipient: recipientOf(rcpt, rs, m), Reason: rs, At: time.Unix(0, at), Attempts: int(attempts)})
		return nil
	}, query, args...)
	if err != nil {
		return nil, false, err
	}
	more := false
	if limit > 0 && len(out) > limit {
		out, more = out[:limit], true
	}
	return out, more, nil
}

// Owners pages the registered owners in registration order.
func (e *Engine) Owners(ctx context.Context, after uint64, limit int) (exchange.OwnersPage, error) {
	var page exchange.OwnersPage
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		page = exchange.OwnersPage{}
		query := `SELECT owner, reg_seq, queued, inbox FROM exchange_owners WHERE tenant = ? AND reg_seq > ? ORDER BY reg_seq`
		args := []any{tenant, int64(after)}
		if limit > 0 {
			query += ` LIMIT ?`
			args = append(args, int64(limit)+1)
		}
		return collect(ctx, q, func(r Rows) error {
			var (
				owner              string
				reg, queued, inbox int64
			)
			if err := r.Scan(&owner, &reg, &queued, &inbox); err != nil {
				return err
			}
			if limit > 0 && len(page.Owners) == limit {
				page.More = true
				return nil
			}
			id, err := parseUUID(owner)
			if err != nil {
				return err
			}
			page.Owners = append(page.Owners, exchange.OwnerInfo{ID: id, Seq: uint64(reg), Queued: int(queued), Inbox: int(inbox)})
			page.Next = uint64(reg)
			return nil
		}, query, args...)
	})
	return page, err
}

// nullString is a nullable text column.
type nullString = sql.NullString
