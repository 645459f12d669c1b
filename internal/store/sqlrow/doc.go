// Package sqlrow is what the SQL engines (internal/store/sqlite and
// internal/store/postgres) hold of their schema's rows as Go values, and
// what they do with those values in memory: a branch's row and its
// message rows, the message text a row stores, and a new branch built by
// the rules before it is written (Seed: create, import, fork). The two
// engines keep one schema in two dialects, so these were written twice, a
// line apart; kept here once so that a rule fixed in one engine is fixed
// in both.
//
// What differs stays in the engines: the SQL, the drivers (database/sql
// and pgx) and their scanning, the transactions, the caches, and the
// wording of a row that does not decode (each engine's damagedRowError).
// Nothing here reads or writes a database.
//
// Import rule: internal/store, internal/store/rowjson, internal/envelope,
// uuid and the standard library; never a driver, grpc or zap.
package sqlrow
