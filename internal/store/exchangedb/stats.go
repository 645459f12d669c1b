package exchangedb

import (
	"context"

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

// Ledger returns every ledger row the database keeps (exchange.Ledgered); an inbox row that was
// ever leased is LedgerLeased, with its attempts.
func (e *Engine) Ledger(ctx context.Context) ([]exchange.LedgerEntry, error) {
	var out []exchange.LedgerEntry
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		out = out[:0]
		return collect(ctx, q, func(r Rows) error {
			var (
				msg, sender, rcpt, state string
				reason, attempts         int64
			)
			if err := r.Scan(&msg, &sender, &rcpt, &state, &reason, &attempts); err != nil {
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
			le.Recipient, le.State, le.Reason, le.Attempts = rcpt, exchange.LedgerState(state), exchange.Reason(reason), int(attempts)
			if le.State == exchange.LedgerInbox && attempts > 0 {
				le.State = exchange.LedgerLeased // stored as an inbox row: it is in the inbox, with its leases
			}
			out = append(out, le)
			return nil
		}, `SELECT message, sender, recipient, state, reason, attempts FROM exchange_ledger WHERE tenant = ?`, tenant)
	})
	return out, err
}
