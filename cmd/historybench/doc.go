// Command historybench measures historyd (issue 8, `make bench`): it builds the historyd binary,
// starts it, drives it over gRPC with its own closed-loop load generator (the client package), and
// reports, each figure measured in the same run:
//
//   - AddMessage throughput over grpc.health.v1 Health/Check throughput, same server and settings,
//     at concurrency 1 and 50 (the stack's own ceiling; target at least 0.8 at 50);
//   - ListMessages (page of 100) latency on a 100k-message branch over a 1k branch (target at most
//     1.5);
//   - AddMessage throughput with 100 watchers over none, every event delivered to every watcher;
//   - Exchange Send+Collect messages/s, direct and broadcast to 100 owners;
//   - resident memory (VmRSS) per stored 1 KB message (target at most 2.5 KB);
//
// and for the durable sqlite engine (issue 14), each sqlite server on a temporary --data-dir:
//
//   - AddMessage throughput at concurrency 50, sqlite --sync=normal over the memory engine (two
//     processes; target at least 0.7);
//   - AddMessage throughput at concurrency 50, sqlite --sync=full over an INSERT of a 1 KB row into
//     PostgreSQL with synchronous_commit on (-postgres-url; target at least 1.0; "skipped" without
//     a PostgreSQL, never a figure);
//   - the ListMessages ratio above, on a sqlite server;
//   - resident memory growth while storing 200k 1 KB messages (target at most the page caches,
//     --sqlite-cache x (--sqlite-readers + 1), + 32 MiB) and disk bytes per message after a
//     checkpoint (target at most 2.5 KB);
//   - time from start to SERVING on a 1M-message database over an empty one (reported);
//   - Exchange Send+Collect direct, 100 owners, concurrency 50, sqlite --sync=normal over the
//     memory engine (issue 17; two processes; target at least 0.6; -engines sqlite-exchange
//     runs this row alone);
//
// and for the PostgreSQL engine (issue 16, -postgres-url; -engines postgres runs only these), each
// historyd on a schema the bench makes and drops, named by the URL's search_path parameter:
//
//   - AddMessage throughput at concurrency 50, a branch per worker, over a raw pgx INSERT of the
//     same 1 KB message's row by the same harness, synchronous_commit on (target at least 0.5;
//     both figures reported). Both sides get -postgres-max-conns connections (50: one per worker,
//     so the pool is not the limit) and never hold them at once (the server allows 100): each run
//     starts a historyd on a fresh schema, and opens the INSERT pool, and closes it;
//   - convoy: the p99 AddMessage latency of 50 appenders on one branch of 100k messages over the
//     p99 of the same on a fresh branch (target at most 2.0). The branch is seeded by historyd
//     writing 100 messages, then SQL copying them onto the same branch (pgseed.go: rows,
//     retained events, the branch's counters), checked through a server that did not write it;
//   - watch across two replicas on one schema (-postgres-replica-conns each, 25): delivery
//     latency from AddMessage on A to the event at a watcher on B, p50 and p99 in ms, each write
//     waiting for the previous event (reported); and AddMessage throughput on A with 100 watchers
//     on B over the branches being written, every event delivered, over none (reported: issue 16
//     names no target);
//   - Exchange Send+Collect direct, 100 owners, concurrency 50, historyd on PostgreSQL over the
//     memory engine (issue 17; the PostgreSQL server on a fresh schema; target at least 0.3).
//
// and acknowledged delivery on each engine (issue 18; -engines lease runs only these):
//
//   - Exchange rounds of Send, Collect and Lease+Ack over rounds of Send, Collect and PopMessage,
//     concurrency 50 (a sender and a receiver per worker), on one historyd: the memory engine,
//     sqlite --sync=normal and PostgreSQL (target at least 0.5 each).
//
// Until historyd serves PostgreSQL (its help lists no --postgres-url), or without a PostgreSQL,
// the PostgreSQL rows say "skipped: ..." and have no figure.
//
// Every figure is the median of several runs, with their minimum and maximum. The table is printed
// and written to bench/results.md with the machine's core count and the date. When a target is
// missed, the scenario runs once more under a CPU profile of the server (or a heap profile, for
// memory) taken through historyd's --pprof-addr, and the profile's top entries go into the results.
// docs/performance.md says what bounds the numbers.
//
// It is a main package: it imports the client package, the generated code and pgx, and internal/
// in one file only, dbgen.go, which writes the 1M-message database through the sqlite engine's Store
// API and copies its rows (a fixture: writing it over gRPC would take minutes); nothing measured
// goes through internal/.
package main
