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
//   - resident memory (VmRSS) per stored 1 KB message (target at most 2.5 KB).
//
// Every figure is the median of several runs, with their minimum and maximum. The table is printed
// and written to bench/results.md with the machine's core count and the date. When a target is
// missed, the scenario runs once more under a CPU profile of the server (or a heap profile, for
// memory) taken through historyd's --pprof-addr, and the profile's top entries go into the results.
// docs/performance.md says what bounds the numbers.
//
// It is a main package: it imports the client package and the generated code, never internal/.
package main
