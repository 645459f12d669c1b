// Package vectors loads the reference records recorded from LionAGI 0.27.0
// (shared/vectors/lionagi-0.27.0.jsonl) and compares historyd's answers with
// them the way the records' README says: JSON documents as JSON values,
// numbers by value, placeholders (<id>, <created_at>, <name>, ...) as
// wildcards that must bind consistently within one record.
//
// It is test support shared by the conformance tests of envelope, store,
// exchange and server. It imports only jsonv.
package vectors
