// Package e2e holds historyd's end-to-end tests: they build the real binary, start it as a user
// would, talk to it with real clients (grpcurl, a Go gRPC client) and signal it. They sit behind the
// `e2e` build tag so that `go test ./...` stays fast and needs nothing but Go; run them with
// `make e2e`. The helpers in main_test.go (startServer, grpcurl, stop) are for every later issue's
// end-to-end tests.
//
// It tests the process from the outside, through the public gRPC clients. Of internal/ it imports
// only what stands outside the process too: pgtest, which gives a test its PostgreSQL schema, and
// the Exchange's ledger vocabulary (exchange.LedgerEntry and its states), in which the replicas
// test reads the ledger rows straight from the database.
package e2e
