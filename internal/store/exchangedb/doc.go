// Package exchangedb is the Exchange (ADR-0006 D5) kept in the history database: one
// implementation of exchange.Service and exchange.Ledgered for SQLite and PostgreSQL, over a small
// Driver that each engine implements (internal/store/sqlite/exchange_driver.go,
// internal/store/postgres/exchange_driver.go): its write and read transactions, fault mapping and
// cross-replica wake-ups. The routing rules are the memory engine's own (exchange.RouteDirect),
// so the two cannot drift; the schema is migrations 00002_exchange.sql and 00003_leases.sql; the
// design, the locks and why they cannot deadlock are in
// docs/decisions/0019-exchange-in-the-database.md. The leases (issue 18) are columns of the
// ledger's inbox rows: lease.go says how they are taken and checked and which locks they take,
// sweep.go how an expired last attempt becomes a dead letter.
//
// Import rule: the standard library, uuid, internal/exchange and internal/envelope; never a
// database driver (the engines bring theirs).
package exchangedb
