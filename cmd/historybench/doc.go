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
//   - time from start to SERVING on a 1M-message database over an empty one (reported).
//
// Every figure is the median of several runs, with their minimum and maximum. The table is printed
// and written to bench/results.md with the machine's core count and the date. When a target is
// missed, the scenario runs once more under a CPU profile of the server (or a heap profile, for
// memory) taken through historyd's --pprof-addr, and the profile's top entries go into the results.
// docs/performance.md says what bounds the numbers.
//
// It is a main package: it imports the client package and the generated code, and internal/ in
// one file only, dbgen.go, which writes the 1M-message database through the sqlite engine's Store
// API and copies its rows (a fixture: writing it over gRPC would take minutes); nothing measured
// goes through internal/.
package main
