package exchangedb

// receivePageQuery is ReceivePage's query, each row with its lease state: args tenant, holder, state, the cursor's ord and seq,
// then the sender when bySender, then the limit when limited.
//
// The cursor is a row value, not (ord > ? OR (ord = ? AND seq > ?)): both databases bound the
// index range of exchange_ledger_by_holder (tenant, holder, state, ord, seq) with it and start
// at the cursor, where the OR form was a filter over every inbox row before it (review17 R8:
// 100k inbox rows, 53 ms a page against 0.5 ms). The order is the same: (ord, seq) ascending.
func receivePageQuery(bySender, limited bool) string {
	query := `SELECT l.ord, l.seq, m.body, l.attempts, l.visible_at, l.held FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
			WHERE l.tenant = ? AND l.holder = ? AND l.state = ? AND (l.ord, l.seq) > (?, ?)`
	if bySender {
		query += ` AND l.sender = ?`
	}
	query += ` ORDER BY l.ord, l.seq`
	if limited {
		query += ` LIMIT ?`
	}
	return query
}
