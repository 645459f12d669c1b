// Package e2e holds historyd's end-to-end tests: they build the real binary, start it as a user
// would, talk to it with real clients (grpcurl, a Go gRPC client) and signal it. They sit behind the
// `e2e` build tag so that `go test ./...` stays fast and needs nothing but Go; run them with
// `make e2e`. The helpers in main_test.go (startServer, grpcurl, stop) are for every later issue's
// end-to-end tests.
//
// It tests the process from the outside, through the public gRPC clients. The exceptions read what
// the API does not show: the PostgreSQL tests make their schemas with pgtest, the replicas test reads
// the Exchange's ledger rows straight from the database in the ledger's vocabulary
// (exchange.LedgerEntry and its states), and the Exchange crash harness reads the ledger from a copy
// of the killed server's sqlite database through the sqlite engine and exchangedb
// (crash_exchange_ledger_test.go).
package e2e
