// Package rowjson is the JSON the SQL engines (internal/store/sqlite and
// internal/store/postgres) store in their TEXT columns, one schema in two
// dialects: an event's body, a branch's description in it, and the result
// a request id remembers. Kept here once so that both engines write and
// read the same bytes.
//
// Import rule: internal/store, internal/envelope and the standard library.
package rowjson
