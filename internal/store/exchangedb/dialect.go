package exchangedb

import (
	"strconv"
	"strings"
)

// Dialect is the database a Driver speaks. The SQL of this package is written once; the
// differences are all here:
//   - placeholders: ? (SQLite) or $n (PostgreSQL, by Rebind);
//   - row locks: PostgreSQL's FOR UPDATE / FOR NO KEY UPDATE / FOR KEY SHARE, and FOR UPDATE ...
//     SKIP LOCKED for the rows a Lease or a Pop takes, nothing in SQLite, whose single writer
//     serialises every write transaction anyway;
//   - the per-owner collect lock: pg_advisory_xact_lock on (schema, tenant, owner) in
//     PostgreSQL, nothing in SQLite (the single writer).
type Dialect int

// The dialects.
const (
	SQLite Dialect = iota
	Postgres
)

// forNoKeyUpdate locks selected owner rows as an UPDATE of their counters does, up front and in
// the order selected (deadlock freedom, docs/decisions/0019).
func (d Dialect) forNoKeyUpdate() string {
	if d == Postgres {
		return " FOR NO KEY UPDATE"
	}
	return ""
}

// forNoKeyUpdateOf is forNoKeyUpdate for the rows of the table aliased alias alone (the
// selected rows of an outer join's other side are not locked, and may be none).
func (d Dialect) forNoKeyUpdateOf(alias string) string {
	if d == Postgres {
		return " FOR NO KEY UPDATE OF " + alias
	}
	return ""
}

// forKeyShare locks a selected owner row against its deletion only (an Unregister's FOR UPDATE
// waits, counter updates do not): the Pop that empties a sender's inbox reads the sender's row so.
func (d Dialect) forKeyShare() string {
	if d == Postgres {
		return " FOR KEY SHARE"
	}
	return ""
}

// forUpdate locks a selected row as a DELETE of it does.
func (d Dialect) forUpdate() string {
	if d == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// skipLocked locks the selected rows of the table aliased alias as an UPDATE of them does,
// skipping the rows another transaction holds: competing leasers (and pops) on any replica take
// different messages instead of queueing behind each other, and a row another one is taking is
// never taken twice (issue 18). A row that another transaction changed since the statement's
// snapshot is checked again against the WHERE clause once its lock is free (PostgreSQL's
// EvalPlanQual): a row leased meanwhile, now hidden, is passed over.
func (d Dialect) skipLocked(alias string) string {
	if d == Postgres {
		return " FOR UPDATE OF " + alias + " SKIP LOCKED"
	}
	return ""
}

// collectLock is the statement that serialises the collects (and the Unregister) of one owner
// across replicas, until the transaction ends; "" in SQLite. Advisory locks belong to the
// database, not the schema: the key includes current_schema(), so deployments in different
// schemas of one database never wait for each other (review R4).
func (d Dialect) collectLock() string {
	if d == Postgres {
		return "SELECT pg_advisory_xact_lock(hashtext('historyd.exchange:' || coalesce(current_schema(), '') || ':' || ?), hashtext(?))"
	}
	return ""
}

// Rebind rewrites ? placeholders as $1, $2... for PostgreSQL. The package's SQL has no ? inside
// string literals.
func Rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// ownerKeys is the condition on exchange_owners o (with its arguments) that selects the owners
// keys names by their whole primary key. SQLite: o.tenant = ? AND o.owner IN (...). PostgreSQL:
// one (tenant, owner) pair per owner, ORed, which only the primary key bounds: with the IN list,
// on tables not analysed yet, the generic plan guessed a selective tenant and read every owner
// row version of the tenant through exchange_owners_by_reg's first column (a bitmap scan) for
// each collect, as the pair of primary key descents looked dearer (issue 17's benchmark: 258
// buffers to lock 2 owners of 100, after 4,000 rounds).
func (d Dialect) ownerKeys(keys []string) (string, []any) {
	args := make([]any, 0, 2*len(keys))
	if d == Postgres {
		var b strings.Builder
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("(o.tenant = ? AND o.owner = ?)")
			args = append(args, tenant, k)
		}
		return "(" + b.String() + ")", args
	}
	args = append(args, tenant)
	for _, k := range keys {
		args = append(args, k)
	}
	return "o.tenant = ? AND o.owner IN (" + placeholders(len(keys)) + ")", args
}

// placeholders returns "?, ?, ..." for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// pruneLock is the statement that serialises the pruning chunks of every replica sharing the
// schema, until the transaction ends (prune.go); "" in SQLite (the single writer).
func (d Dialect) pruneLock() string {
	if d == Postgres {
		return "SELECT pg_advisory_xact_lock(hashtext('historyd.exchange.prune:' || current_schema()))"
	}
	return ""
}
