// Package sqlrow is what the SQL engines (internal/store/sqlite and
// internal/store/postgres) do with their schema's rows in memory, once for
// both: the rows as Go values (a branch's row, its message rows, a message's
// stored text), a new branch built by the rules before it is written (Seed:
// create, import, fork), a write's branch as the rules read it (State) and
// the placement of a planned message on the rows (Place), a write's result
// (Written, CommitPlan, Clear, SetProgression), the reads made of rows
// (pages and their tokens, the last message, chat, export), and the scopes
// and answers of the request records. The two engines keep one schema in
// two dialects, so all this was written twice, a line apart; kept here so
// that a rule fixed in one engine is fixed in both.
//
// What differs stays in the engines: the SQL, the drivers (database/sql and
// pgx) and their scanning, the transactions, sqlite's writer and caches,
// PostgreSQL's batches and group commit, and the wording of a row that does
// not decode (each engine's damagedRowError). Nothing here reads or writes
// a database: a State reads messages through the engine's MessageReader,
// the reads through its Rows, and the engine writes what they return. On
// the write path everything here is a direct call (but for the
// MessageReader, called only beside a read of the database, and
// CommitPlan's apply) and makes no allocation the engines did not make
// before.
//
// Import rule: internal/store, internal/store/rowjson, internal/envelope,
// uuid and the standard library; never a driver, grpc or zap.
package sqlrow
