import { AppendStreamBrokenError, connect } from "@historyd/client";

// Keepalive: while a call is open, ping a connection that has been quiet for 30 s, and drop it when
// the ping is not answered within 20 s (historyd's --keepalive-min-time is 10 s: ping less often).
const client = connect(process.env.HISTORYD_ADDR ?? "127.0.0.1:50051", {
  tls: false,
  keepalive: { timeMs: 30_000, timeoutMs: 20_000 },
});
const log = await client.createBranch({ name: "log" });

// Up to 64 items in flight, answered in order. Each has 10 s for its answer once sent (its wait for
// a place in the window is not counted): an item unanswered by then cancels the stream, and it and
// the items after it reject with AppendStreamBrokenError, DEADLINE_EXCEEDED.
const appender = client.appender({ window: 64, timeoutMs: 10_000 });
const results = await Promise.allSettled(
  Array.from({ length: 100 }, (_, i) =>
    appender.append({ branchId: log.id, input: { case: "instruction", value: { instructionValue: { case: "instruction", value: `step ${i}` } } } }),
  ),
);
await appender.close();

// A broken item may or may not have been applied: append it again with its requestId.
const again = results.flatMap((r) => (r.status === "rejected" && r.reason instanceof AppendStreamBrokenError ? [r.reason.requestId] : []));
console.log("written:", results.filter((r) => r.status === "fulfilled").length, "to append again:", again.length);
console.log("head:", (await log.describe()).headSequence);
client.close();
