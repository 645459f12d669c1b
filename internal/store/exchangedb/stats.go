package exchangedb

import (
	"context"
	"time"

	"github.com/historyd/historyd/internal/exchange"
)

// Stats reads what the Exchange holds from the owners' counters, in one read transaction;
// Subscribers are this process's; no byte figures (the database engines have no byte budget).
func (e *Engine) Stats(ctx context.Context) (exchange.Stats, error) {
	var st exchange.Stats
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		var owners, queued, inbox, dead int64
		if err := q.QueryRow(ctx, `SELECT COUNT(*), CAST(COALESCE(SUM(queued), 0) AS BIGINT), CAST(COALESCE(SUM(inbox), 0) AS BIGINT), CAST(COALESCE(SUM(dead), 0) AS BIGINT)
			FROM exchange_owners WHERE tenant = ?`, tenant).Scan(&owners, &queued, &inbox, &dead); err != nil {
			return err
		}
		var lettered int64
		err := q.QueryRow(ctx, `SELECT value FROM exchange_counters WHERE tenant = ? AND name = 'dead_lettered'`, tenant).Scan(&lettered)
		if err != nil && !q.IsNoRows(err) {
			return err
		}
		st = exchange.Stats{Owners: int(owners), Queued: int(queued), Inbox: int(inbox), DeadLetters: int(dead), DeadLettered: uint64(lettered)}
		return nil
	})
	st.Subscribers = int(e.subs.open.Load())
	return st, err
}

// Ledger returns every ledger row the database keeps (exchange.Ledgered).
func (e *Engine) Ledger(ctx context.Context) ([]exchange.LedgerEntry, error) {
	var out []exchange.LedgerEntry
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		out = out[:0]
		return collect(ctx, q, func(r Rows) error {
			var (
				msg, sender, rcpt, state string
				reason                   int64
			)
			if err := r.Scan(&msg, &sender, &rcpt, &state, &reason); err != nil {
				return err
			}
			var (
				le  exchange.LedgerEntry
				err error
			)
			if le.Message, err = parseUUID(msg); err != nil {
				return err
			}
			if le.Sender, err = parseUUID(sender); err != nil {
				return err
			}
			le.Recipient, le.State, le.Reason = rcpt, exchange.LedgerState(state), exchange.Reason(reason)
			out = append(out, le)
			return nil
		}, `SELECT message, sender, recipient, state, reason FROM exchange_ledger WHERE tenant = ?`, tenant)
	})
	return out, err
}

// pruneEvery is how often the pruner runs, at most: a fraction of the retention.
func (e *Engine) pruneEvery() time.Duration {
	return min(max(e.cfg.retention/4, time.Second), time.Minute)
}

// runPruner forgets, every pruneEvery, the ledger rows in a terminal state for longer than the
// retention, the messages no row refers to any more, and the expired request ids. Owner: the
// Engine; stopped by Close.
func (e *Engine) runPruner() {
	defer e.wg.Done()
	t := time.NewTicker(e.pruneEvery())
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		ctx, cancel := e.background(time.Minute)
		_ = e.Prune(ctx) // a failure is retried at the next tick; the store's health reports the fault
		cancel()
	}
}

// Prune runs one pruning pass now (the pruner's; tests call it).
func (e *Engine) Prune(ctx context.Context) error {
	now := e.now()
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if _, err := q.Exec(ctx, `DELETE FROM exchange_ledger WHERE tenant = ? AND state IN (?, ?, ?) AND done_at > 0 AND done_at < ?`,
			tenant, stPopped, stReturned, stEvicted, now.Add(-e.cfg.retention).UnixNano()); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `DELETE FROM exchange_messages WHERE tenant = ? AND NOT EXISTS
			(SELECT 1 FROM exchange_ledger l WHERE l.tenant = exchange_messages.tenant AND l.message = exchange_messages.id)`, tenant); err != nil {
			return err
		}
		_, err := q.Exec(ctx, `DELETE FROM exchange_requests WHERE tenant = ? AND created_ns < ?`, tenant, now.Add(-e.set.RequestTTL).UnixNano())
		return err
	}, nil)
}
