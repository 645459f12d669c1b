// Package vectors loads the reference records recorded from LionAGI 0.27.0
// (testdata/lionagi-0.27.0/lionagi-0.27.0.jsonl, the repository's own copy;
// $HISTORYD_VECTORS overrides it) and compares historyd's answers with
// them the way the records' README says: JSON documents as JSON values,
// numbers by value, placeholders (<id>, <created_at>, <name>, ...) as
// wildcards that must bind consistently within one record.
//
// It is test support shared by the conformance tests of envelope, store,
// exchange and server, with the pieces of the scenario step language they
// share (steps.go). It imports envelope and its jsonv, never the packages
// whose tests use it.
package vectors
