package exchangedb

import (
	"context"
	"time"
)

// pruneChunk is how many rows one pruning transaction forgets at most: a pass is a series of
// short write transactions, never one that holds the writer (SQLite's single writer: every write
// of the process) for as long as the backlog takes (review17 R6). A variable for the tests.
var pruneChunk = 500

// The pruning statements. Each is bounded by an index and by pruneChunk, never by what the
// Exchange holds: the selections read exchange_ledger_by_done and exchange_requests_by_age from
// the oldest row, and every delete names one row by its primary key, so no planner can choose to
// read the table (PostgreSQL did, for a DELETE ... IN (SELECT ... LIMIT), on small tables). A scan
// of every message for the unreferenced ones (the first version) read every live message at
// every pass: 200k live messages stalled all SQLite writes 0.7-0.9 s a minute (review17 R6).
// plan_test.go checks their plans on both databases.
const (
	// qPruneSelect is the oldest chunk of terminal rows past the retention. Args: tenant, the
	// four terminal states (popped, acked, returned, evicted), the cutoff, the chunk.
	qPruneSelect = `SELECT message, recipient FROM exchange_ledger WHERE tenant = ? AND state IN (?, ?, ?, ?) AND done_at > 0 AND done_at < ?
		ORDER BY done_at LIMIT ?`
	// qPruneRow deletes one ledger row. Args: tenant, message, recipient.
	qPruneRow = `DELETE FROM exchange_ledger WHERE tenant = ? AND message = ? AND recipient = ?`
	// qPruneMessage deletes a message no ledger row refers to any more. Args: tenant, id.
	qPruneMessage = `DELETE FROM exchange_messages WHERE tenant = ? AND id = ? AND NOT EXISTS
		(SELECT 1 FROM exchange_ledger l WHERE l.tenant = exchange_messages.tenant AND l.message = exchange_messages.id)`
	// qPruneRequestsSelect is the oldest chunk of expired request ids. Args: tenant, the cutoff,
	// the chunk.
	qPruneRequestsSelect = `SELECT sender, request_id FROM exchange_requests WHERE tenant = ? AND created_ns < ? ORDER BY created_ns LIMIT ?`
	// qPruneRequest deletes one request id. Args: tenant, sender, request id.
	qPruneRequest = `DELETE FROM exchange_requests WHERE tenant = ? AND sender = ? AND request_id = ?`
)

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

// Prune runs one pruning pass now (the pruner's; tests call it): chunks of at most pruneChunk
// rows, each in a write transaction of its own, until a chunk comes back short.
//
// A message goes with the last of its ledger rows: only the messages of the rows a chunk forgets
// are looked at. That misses none: Prune is the only statement that deletes ledger rows but
// Collect's delete of an outbox row, and Collect gives every message it collects a row in its
// place (a delivery or a drop; a broadcast nobody else was registered for is a dead letter).
func (e *Engine) Prune(ctx context.Context) error {
	now := e.now()
	cutoff, expired := now.Add(-e.cfg.retention).UnixNano(), now.Add(-e.set.RequestTTL).UnixNano()
	for _, chunk := range []func(ctx context.Context, q Querier) (int, error){
		func(ctx context.Context, q Querier) (int, error) { return e.pruneLedger(ctx, q, cutoff) },
		func(ctx context.Context, q Querier) (int, error) { return e.pruneRequests(ctx, q, expired) },
	} {
		for {
			var n int
			err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
				var err error
				n, err = chunk(ctx, q)
				return err
			}, nil)
			if err != nil {
				return err
			}
			if n < pruneChunk {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// pruneLock serialises the pruning chunks of the replicas (PostgreSQL): two chunks forgetting the
// last two rows of one message at once would each still see the other's row, and keep the message.
func (e *Engine) pruneLock(ctx context.Context, q Querier) error {
	if s := e.dia.pruneLock(); s != "" {
		_, err := q.Exec(ctx, s)
		return err
	}
	return nil
}

// pruneLedger forgets the oldest chunk of terminal rows past cutoff, then those of their messages
// no row refers to any more; it returns how many rows it forgot.
func (e *Engine) pruneLedger(ctx context.Context, q Querier, cutoff int64) (int, error) {
	if err := e.pruneLock(ctx, q); err != nil {
		return 0, err
	}
	type key struct{ msg, rcpt string }
	var rows []key
	err := collect(ctx, q, func(r Rows) error {
		var k key
		if err := r.Scan(&k.msg, &k.rcpt); err != nil {
			return err
		}
		rows = append(rows, k)
		return nil
	}, qPruneSelect, tenant, stPopped, stAcked, stReturned, stEvicted, cutoff, int64(pruneChunk))
	if err != nil {
		return 0, err
	}
	for _, k := range rows {
		if err := q.Defer(ctx, qPruneRow, tenant, k.msg, k.rcpt); err != nil {
			return 0, err
		}
	}
	seen := make(map[string]bool, len(rows))
	for _, k := range rows {
		if seen[k.msg] {
			continue
		}
		seen[k.msg] = true
		if err := q.Defer(ctx, qPruneMessage, tenant, k.msg); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// pruneRequests forgets the oldest chunk of the request ids created before expired; it returns
// how many it forgot.
func (e *Engine) pruneRequests(ctx context.Context, q Querier, expired int64) (int, error) {
	type key struct{ sender, id string }
	var ids []key
	err := collect(ctx, q, func(r Rows) error {
		var k key
		if err := r.Scan(&k.sender, &k.id); err != nil {
			return err
		}
		ids = append(ids, k)
		return nil
	}, qPruneRequestsSelect, tenant, expired, int64(pruneChunk))
	if err != nil {
		return 0, err
	}
	for _, k := range ids {
		if err := q.Defer(ctx, qPruneRequest, tenant, k.sender, k.id); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}
