// Command historyd serves the LionAGI message protocol over gRPC.
//
// This package is wiring only: it reads the configuration (flags, with HISTORYD_* environment
// fallbacks), builds the logger, loads the credentials (bearer tokens, TLS files), listens, hands the
// listener to internal/server, serves the metrics listener, and turns signals into the lifecycle:
// SIGINT or SIGTERM an orderly shutdown, a second one an immediate stop, SIGHUP a reload of the
// credentials. It imports internal/server and the backends it builds and hands to it
// (internal/exchange; internal/store, its sqlite engine and migrations) and nothing else of ours
// (docs/design.md#layers: cmd builds the backends); no behaviour of the service lives here.
//
// Usage:
//
//	historyd [serve] [--listen ADDR] [--log-level LEVEL] [--log-format json|console] [--grace-period DURATION] [flags]
//	historyd healthcheck [--addr HOST:PORT] [--service NAME] [--timeout DURATION] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]
//	historyd migrate [--data-dir DIR]
//	historyd migrate --store postgres [--postgres-url URL]
//	historyd backup --to FILE [--force] [--token-file FILE] [--addr HOST:PORT] [--tls ...]
//	historyd version
//	historyd help
//
// historyd --help (on stdout) lists the subcommands and every flag, generated from the settings
// table (cli.go). Exit codes: 0 after a shutdown on SIGINT or SIGTERM, 1 when the server cannot load
// its credentials, cannot listen or stops serving on its own, 2 for an invalid flag or environment
// value (one line naming it, with a valid value). healthcheck exits 0 only when the server answers
// SERVING, 1 otherwise, 2 for an invalid flag; without --addr it checks HISTORYD_LISTEN. migrate
// applies the sqlite database's pending migrations (exit 0 when the schema is up to date, 1 when it
// cannot, e.g. while a server holds the directory). backup writes a running server's consistent
// copy of its database to FILE (AdminService.Backup; exit 0 when FILE holds it, 1 when it failed and
// FILE is untouched, 2 for an invalid flag).
package main
