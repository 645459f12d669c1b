package postgres

// The SQL of the store (the SQLite engine's queries.go in the postgres
// dialect). pgx prepares and caches each statement per connection.

const (
	// branches
	qBranch = `SELECT ` + branchCols + ` FROM branches WHERE tenant = '' AND id = $1`
	// qBranchForUpdate is a write's first statement: the row lock orders a
	// branch's writers across replicas, held only for the write.
	qBranchForUpdate = qBranch + ` FOR UPDATE`
	// qBranchesForUpdate is a group's first statement (group.go): its
	// branches' rows locked, those another transaction holds skipped (their
	// writes run alone after the group, which so never waits on a lock).
	qBranchesForUpdate = `SELECT ` + branchCols + ` FROM branches WHERE tenant = '' AND id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED`
	// qBranchForShare is a fork's read of its source: no write changes the
	// source while it is copied.
	qBranchForShare = qBranch + ` FOR SHARE`
	qBranchExists   = `SELECT 1 FROM branches WHERE tenant = '' AND id = $1`
	qIncarnation    = `SELECT incarnation FROM branches WHERE tenant = '' AND id = $1`
	qBranchesFirst  = `SELECT ` + branchCols + ` FROM branches WHERE tenant = '' ORDER BY id LIMIT $1`
	qBranchesAfter  = `SELECT ` + branchCols + ` FROM branches WHERE tenant = '' AND id > $1 ORDER BY id LIMIT $2`
	qCounts         = `SELECT COUNT(*), COALESCE(SUM(message_count), 0) FROM branches WHERE tenant = ''`
	qInsertBranch   = `INSERT INTO branches (tenant, ` + branchCols + `)
		VALUES ('', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`
	qUpdateBranch = `UPDATE branches SET head = $1, epoch = $2, sel_epoch = $3, selected = $4,
		system_id = $5, next_pos = $6, next_rank = $7, message_count = $8 WHERE tenant = '' AND id = $9`
	qDeleteBranch = `DELETE FROM branches WHERE tenant = '' AND id = $1`
	// qHeads is the sweep's one query for every watched branch.
	qHeads = `SELECT id, incarnation, head FROM branches WHERE tenant = '' AND id = ANY($1)`

	// messages
	qMessage         = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND id = $2`
	qMessagesThrough = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND pos <= $2 ORDER BY pos`
	qFullOrder       = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 ORDER BY pos`
	qPosAsc          = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND pos >= $2 ORDER BY pos ASC LIMIT $3`
	qPosDesc         = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND pos <= $2 ORDER BY pos DESC LIMIT $3`
	qKindPosAsc      = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND kind = $2 AND pos >= $3 ORDER BY pos ASC LIMIT $4`
	qKindPosDesc     = `SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = $1 AND kind = $2 AND pos <= $3 ORDER BY pos DESC LIMIT $4`
	qInsertMessage   = `INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body) VALUES ('', $1, $2, $3, $4, $5, $6, $7)`
	qReplaceMessage  = `UPDATE messages SET rank = $1, seq = $2, body = $3 WHERE tenant = '' AND branch_id = $4 AND id = $5`
	qRemoveMessage   = `DELETE FROM messages WHERE tenant = '' AND branch_id = $1 AND id = $2`
	qClearMessages   = `DELETE FROM messages WHERE tenant = '' AND branch_id = $1 AND pos >= 0`
	qDeleteMessages  = `DELETE FROM messages WHERE tenant = '' AND branch_id = $1`

	// qAppend is an append's three writes in one statement (issue 16
	// benchmark: statements, not rows, are what a small server spends its
	// CPU on): qInsertMessage, qInsertEvent and qUpdateBranch as
	// data-modifying CTEs, their parameters one after the other. They
	// touch three tables and read nothing the others write.
	qAppend = `WITH m AS (INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body) VALUES ('', $1, $2, $3, $4, $5, $6, $7)),
		e AS (INSERT INTO events (tenant, incarnation, seq, commit_first, commit_last, kind, msg_index, msg_id, body)
			VALUES ('', $8, $9, $10, $11, $12, $13, $14, $15))
		UPDATE branches SET head = $16, epoch = $17, sel_epoch = $18, selected = $19,
			system_id = $20, next_pos = $21, next_rank = $22, message_count = $23 WHERE tenant = '' AND id = $24`

	// qAppendMany is qAppend for several branches at once (a group's
	// appends, group.go): each parameter an array of one column, a row a
	// branch, in qAppend's order.
	qAppendMany = `WITH m AS (INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body)
			SELECT '', * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[])),
		e AS (INSERT INTO events (tenant, incarnation, seq, commit_first, commit_last, kind, msg_index, msg_id, body)
			SELECT '', * FROM unnest($8::uuid[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::uuid[], $15::text[]))
		UPDATE branches b SET head = u.head, epoch = u.epoch, sel_epoch = u.sel_epoch, selected = u.selected,
			system_id = u.system_id, next_pos = u.next_pos, next_rank = u.next_rank, message_count = u.message_count
		FROM unnest($16::bigint[], $17::bigint[], $18::bigint[], $19::text[], $20::uuid[], $21::bigint[], $22::bigint[], $23::bigint[], $24::uuid[])
			AS u(head, epoch, sel_epoch, selected, system_id, next_pos, next_rank, message_count, id)
		WHERE b.tenant = '' AND b.id = u.id`
	// qAppendArgs is how many parameters qAppend takes.
	qAppendArgs = 24

	// events
	qInsertEvent = `INSERT INTO events (tenant, incarnation, seq, commit_first, commit_last, kind, msg_index, msg_id, body)
		VALUES ('', $1, $2, $3, $4, $5, $6, $7, $8)`
	// qEvents reads an event whose body is NULL from the current version
	// of its message, in one statement: one snapshot.
	qEvents = `SELECT e.seq, e.commit_first, e.commit_last, e.kind, e.msg_index,
			COALESCE(e.body, '{"m":' || m.body || '}')
		FROM events e LEFT JOIN messages m ON e.body IS NULL AND m.tenant = '' AND m.branch_id = $1 AND m.id = e.msg_id AND m.seq = e.seq
		WHERE e.tenant = '' AND e.incarnation = $2 AND e.seq > $3 AND e.seq <= $4 ORDER BY e.seq LIMIT $5`
	qKeepVersion  = `UPDATE events SET body = $1 WHERE tenant = '' AND incarnation = $2 AND seq = $3 AND msg_id = $4 AND body IS NULL`
	qKeepVersions = `UPDATE events SET body = '{"m":' || (SELECT m.body FROM messages m
			WHERE m.tenant = '' AND m.branch_id = $1 AND m.id = events.msg_id) || '}'
		WHERE tenant = '' AND incarnation = $2 AND body IS NULL AND msg_id IS NOT NULL AND msg_id IS DISTINCT FROM $3`
	qOldestEvent  = `SELECT COALESCE(MIN(seq), 0) FROM events WHERE tenant = '' AND incarnation = $1`
	qLastEvent    = `SELECT COALESCE(MAX(seq), 0) FROM events WHERE tenant = '' AND incarnation = $1`
	qTrimEvents   = `DELETE FROM events WHERE tenant = '' AND incarnation = $1 AND seq < $2`
	qDeleteEvents = `DELETE FROM events WHERE tenant = '' AND incarnation = $1`
	// A deleted incarnation's events stay for the subscribers of every
	// replica to read through BRANCH_DELETED; the delete marks it in
	// store_meta with the time, and a janitor deletes it past the grace.
	qMarkDead   = `INSERT INTO store_meta (tenant, key, value) VALUES ('', $1, $2) ON CONFLICT (tenant, key) DO UPDATE SET value = EXCLUDED.value`
	qUnmarkDead = `DELETE FROM store_meta WHERE tenant = '' AND key = $1`
	qDeadMarks  = `SELECT key, value FROM store_meta WHERE tenant = '' AND key LIKE 'dead-incarnation:%'`

	// requests (idempotency records)
	qRequest = `SELECT op, created_ns, result FROM requests WHERE tenant = '' AND scope = $1 AND request_id = $2`
	// qBranchRequest is qRequest in the scope of the branch's incarnation:
	// a write sends it in one round trip after qBranchForUpdate, so it runs
	// (and takes its snapshot) once the row lock is held.
	qBranchRequest = `SELECT op, created_ns, result FROM requests WHERE tenant = '' AND request_id = $2
		AND scope = (SELECT 'i:' || incarnation::text FROM branches WHERE tenant = '' AND id = $1)`
	qRemember = `INSERT INTO requests (tenant, scope, request_id, op, n, created_ns, result)
		VALUES ('', $1, $2, $3, (SELECT COALESCE(MAX(n), 0) + 1 FROM requests WHERE tenant = '' AND scope = $1), $4, $5)
		ON CONFLICT (tenant, scope, request_id) DO UPDATE SET op = EXCLUDED.op, n = EXCLUDED.n, created_ns = EXCLUDED.created_ns, result = EXCLUDED.result`
	qForgetOldest = `DELETE FROM requests WHERE tenant = '' AND scope = $1
		AND n <= (SELECT MAX(n) FROM requests WHERE tenant = '' AND scope = $1) - $2`
	// The janitor forgets the ids past the window (a write, its scope's
	// oldest past the bound only: two writes deleting the same rows of
	// other scopes would wait on each other).
	qForgetExpired = `DELETE FROM requests WHERE tenant = '' AND created_ns <= $1`
	qForgetScope   = `DELETE FROM requests WHERE tenant = '' AND scope = $1`

	// qCreateLock orders a principal's branch-creating calls of one request
	// id across replicas (the scope and id hashed to the lock's key).
	qCreateLock = `SELECT pg_advisory_xact_lock($1)`
	// qNotify is the notifier's wake-up, sent outside any write transaction.
	qNotify = `SELECT pg_notify('` + channel + `', $1)`
)
