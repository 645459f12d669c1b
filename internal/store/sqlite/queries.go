package sqlite

// The SQL of the store. Every statement is prepared once per connection
// when the store opens (stmtCache): preparing one inside a transaction on
// the single write connection would wait for that connection forever.

var (
	// branches
	qBranch        = query(`SELECT ` + branchCols + ` FROM branches WHERE tenant = '' AND id = ?`)
	qBranchExists  = query(`SELECT 1 FROM branches WHERE tenant = '' AND id = ?`)
	qIncarnation   = query(`SELECT incarnation FROM branches WHERE tenant = '' AND id = ?`)
	qBranchesFirst = query(`SELECT ` + branchCols + ` FROM branches WHERE tenant = '' ORDER BY id LIMIT ?`)
	qBranchesAfter = query(`SELECT ` + branchCols + ` FROM branches WHERE tenant = '' AND id > ? ORDER BY id LIMIT ?`)
	qCounts        = query(`SELECT COUNT(*), SUM(message_count) FROM branches WHERE tenant = ''`)
	qInsertBranch  = query(`INSERT INTO branches (tenant, ` + branchCols + `)
		VALUES ('', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qUpdateBranch = query(`UPDATE branches SET head = ?, epoch = ?, sel_epoch = ?, selected = ?,
		system_id = ?, next_pos = ?, next_rank = ?, message_count = ? WHERE tenant = '' AND id = ?`)
	qDeleteBranch = query(`DELETE FROM branches WHERE tenant = '' AND id = ?`)

	// messages
	qMessage         = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND id = ?`)
	qMessagesThrough = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND pos <= ? ORDER BY pos`)
	qFullOrder       = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? ORDER BY pos`)
	// positionRows: a range of positions, ascending or descending, of every
	// message or of one kind.
	qPosAsc         = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND pos >= ? ORDER BY pos ASC LIMIT ?`)
	qPosDesc        = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND pos <= ? ORDER BY pos DESC LIMIT ?`)
	qKindPosAsc     = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND kind = ? AND pos >= ? ORDER BY pos ASC LIMIT ?`)
	qKindPosDesc    = query(`SELECT ` + msgCols + ` FROM messages WHERE tenant = '' AND branch_id = ? AND kind = ? AND pos <= ? ORDER BY pos DESC LIMIT ?`)
	qInsertMessage  = query(`INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body) VALUES ('', ?, ?, ?, ?, ?, ?, ?)`)
	qReplaceMessage = query(`UPDATE messages SET rank = ?, seq = ?, body = ? WHERE tenant = '' AND branch_id = ? AND id = ?`)
	qRemoveMessage  = query(`DELETE FROM messages WHERE tenant = '' AND branch_id = ? AND id = ?`)
	qClearMessages  = query(`DELETE FROM messages WHERE tenant = '' AND branch_id = ? AND pos >= 0`)
	qDeleteMessages = query(`DELETE FROM messages WHERE tenant = '' AND branch_id = ?`)

	// events
	qInsertEvent = query(`INSERT INTO events (tenant, incarnation, seq, commit_first, commit_last, kind, msg_index, msg_id, body)
		VALUES ('', ?, ?, ?, ?, ?, ?, ?, ?)`)
	// qEvents reads an event whose body is NULL from the current version
	// of its message.
	qEvents = query(`SELECT e.seq, e.commit_first, e.commit_last, e.kind, e.msg_index,
			COALESCE(e.body, '{"m":' || m.body || '}')
		FROM events e LEFT JOIN messages m ON e.body IS NULL AND m.tenant = '' AND m.branch_id = ? AND m.id = e.msg_id AND m.seq = e.seq
		WHERE e.tenant = '' AND e.incarnation = ? AND e.seq > ? AND e.seq <= ? ORDER BY e.seq LIMIT ?`)
	// qKeepVersion copies a message version into its event before the
	// version is rewritten or deleted.
	qKeepVersion = query(`UPDATE events SET body = ? WHERE tenant = '' AND incarnation = ? AND seq = ? AND msg_id = ? AND body IS NULL`)
	// qKeepVersions does it for every message of a branch but one (a
	// clear keeps the system; dialect: "IS NOT ?" is "IS DISTINCT FROM $n"
	// in PostgreSQL).
	qKeepVersions = query(`UPDATE events SET body = '{"m":' || (SELECT m.body FROM messages m
			WHERE m.tenant = '' AND m.branch_id = ? AND m.id = events.msg_id) || '}'
		WHERE tenant = '' AND incarnation = ? AND body IS NULL AND msg_id IS NOT NULL AND msg_id IS NOT ?`)
	qOldestEvent  = query(`SELECT MIN(seq) FROM events WHERE tenant = '' AND incarnation = ?`)
	qTrimEvents   = query(`DELETE FROM events WHERE tenant = '' AND incarnation = ? AND seq < ?`)
	qDeleteEvents = query(`DELETE FROM events WHERE tenant = '' AND incarnation = ?`)
	// A deleted incarnation whose events are still to delete is marked in
	// store_meta by the delete's transaction; the sweep removes the mark
	// with the events, so a start finds only what a crash interrupted.
	qMarkDead   = query(`INSERT OR REPLACE INTO store_meta (tenant, key, value) VALUES ('', ?, '')`)
	qUnmarkDead = query(`DELETE FROM store_meta WHERE tenant = '' AND key = ?`)
	qDeadMarks  = query(`SELECT key FROM store_meta WHERE tenant = '' AND key LIKE 'dead-incarnation:%'`)

	// requests (idempotency records)
	qRequest     = query(`SELECT op, created_ns, result FROM requests WHERE tenant = '' AND scope = ? AND request_id = ?`)
	qRequestLast = query(`SELECT COALESCE(MAX(n), 0) FROM requests WHERE tenant = '' AND scope = ?`)
	qRemember    = query(`INSERT OR REPLACE INTO requests (tenant, scope, request_id, op, n, created_ns, result)
		VALUES ('', ?, ?, ?, ?, ?, ?)`)
	qForgetOldest  = query(`DELETE FROM requests WHERE tenant = '' AND scope = ? AND n <= ?`)
	qForgetExpired = query(`DELETE FROM requests WHERE tenant = '' AND created_ns <= ?`)
	qForgetScope   = query(`DELETE FROM requests WHERE tenant = '' AND scope = ?`)
)

// queries are every statement above, prepared when the store opens.
var queries []string

func query(q string) string {
	queries = append(queries, q)
	return q
}
