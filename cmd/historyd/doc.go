// Command historyd serves the LionAGI message protocol over gRPC.
//
// This package is wiring only: it reads the configuration (flags, with HISTORYD_* environment
// fallbacks), builds the logger, listens, hands the listener to internal/server, and turns SIGINT
// and SIGTERM into an orderly shutdown. It imports internal/server and the backends it builds and
// hands to it (internal/exchange) and nothing else of ours (DESIGN.md "Layers": cmd builds the
// backends); no behaviour of the service lives here.
//
// Usage:
//
//	historyd [--listen ADDR] [--log-level LEVEL] [--log-format json|console] [--grace-period DURATION]
//
// Exit codes: 0 after a shutdown on SIGINT or SIGTERM, 1 when the server cannot listen or stops
// serving on its own, 2 for an invalid flag or environment value.
package main
