// The pipelined append stream through the package's Appender (issue 21: "the Python and TypeScript
// clients wrap it too"), against the real historyd binary: answers in the order appended, items on
// a branch applied in that order, a failed item failing alone with its typed error.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AppendStreamBrokenError, Code, connect, ErrorReason, HistorydError, type HistorydClient } from "../src/index.js";
import { serveSuite, type Historyd } from "./helpers/server.js";

describe("appender", () => {
  let server: Historyd;
  let client: HistorydClient;
  serveSuite((s, c) => ([server, client] = [s, c]));

  test("100 items on two branches, window 8: in order, one failing alone", async () => {
    const a = await client.createBranch();
    const b = await client.createBranch();
    const missing = "00000000-0000-4000-8000-000000000001";
    const ap = client.appender(8);
    const branches: string[] = [];
    const answers = [];
    for (let i = 0; i < 100; i++) {
      const branchId = i === 50 ? missing : i % 3 === 0 ? b.id : a.id;
      branches.push(branchId);
      answers.push(
        ap.append({ branchId, input: { case: "instruction", value: { instructionValue: { case: "instruction", value: `m${i}` } } } }).then(
          (m) => ({ m, err: undefined }),
          (err: unknown) => ({ m: undefined, err }),
        ),
      );
    }
    const seqs = new Map<string, bigint>([[a.id, 1n], [b.id, 1n]]);
    const results = await Promise.all(answers);
    results.forEach((r, i) => {
      if (i === 50) {
        assert.ok(r.err instanceof HistorydError, `item 50: ${String(r.err)}`);
        assert.equal((r.err as HistorydError).reason, ErrorReason.BRANCH_NOT_FOUND);
        return;
      }
      assert.equal(r.err, undefined, `item ${i}: ${String(r.err)}`);
      const want = seqs.get(branches[i]!)! + 1n;
      seqs.set(branches[i]!, want);
      assert.equal(r.m!.sequence, want, `item ${i}: items on a branch apply in the order appended`);
    });
    await ap.close();
    await assert.rejects(ap.append({ branchId: a.id }), /closed/);
  });

  // The rule (issue 21; appender.ts; the Go client's client/append_codec.go): a failed item fails
  // alone, and the stream goes on. An item that cannot be encoded (an expectedHeadSequence of -1n,
  // 2^64 or 1.5) was encoded inside Connect's request pump, which aborted the whole stream: every
  // item in flight rejected with AppendStreamBrokenError (review of the clients, fault 2).
  test("an item that cannot be encoded fails alone, INVALID_ARGUMENT, unsent; the stream goes on", async () => {
    const branch = await client.createBranch();
    const ap = client.appender(8);
    const instr = (text: string, expectedHeadSequence?: bigint) => ({
      branchId: branch.id,
      expectedHeadSequence,
      input: { case: "instruction" as const, value: { instructionValue: { case: "instruction" as const, value: text } } },
    });
    const settle = (p: Promise<{ sequence: bigint }>) => p.then((m) => ({ m, err: undefined }), (err: unknown) => ({ m: undefined, err }));
    const unencodable = [-1n, 2n ** 64n, 1.5 as unknown as bigint];
    const answers = [
      settle(ap.append(instr("a"))),
      ...unencodable.map((v, i) => settle(ap.append(instr(`bad ${i}`, v)))),
      settle(ap.append(instr("c"))),
    ];
    const results = await Promise.all(answers);
    assert.equal(results[0]!.err, undefined, `the item before: ${String(results[0]!.err)}`);
    assert.equal(results[4]!.err, undefined, `the item after: ${String(results[4]!.err)}`);
    const first = results[0]!.m!.sequence;
    assert.equal(results[4]!.m!.sequence, first + 1n, "the item after follows the item before");
    for (const [i, r] of results.slice(1, 4).entries()) {
      assert.ok(r.err instanceof HistorydError, `bad ${i}: ${String(r.err)}`);
      assert.equal(r.err.code, Code.InvalidArgument, `bad ${i}: ${String(r.err)}`);
      assert.match(r.err.rawMessage, /cannot be encoded/);
    }
    assert.equal((await ap.append(instr("d"))).sequence, first + 2n, "the stream goes on");
    await ap.close();
    const texts = [];
    for await (const m of branch.messages()) if (m.content.case === "instruction") texts.push(m.content.value.instructionValue.value);
    assert.deepEqual(texts, ["a", "c", "d"], "no unencodable item was sent");
  });

  // The rule (appender.ts; README "The appender"): the default deadline, the client's timeoutMs,
  // bounds the wait for an item's answer from when the item is sent, not its wait for a place in
  // the window. It counted from the call to append(): a batch appended at once (the README's
  // Promise.allSettled pattern) counted the queue against each item, the first to run out
  // cancelled the stream, and every item in flight came back AppendStreamBrokenError, some of them
  // applied (review of the clients 2, fault 1: 20,000 items at timeoutMs 3000, 18,580 broken).
  // 6000 items take longer than the 1 s timeout here, each answer far less.
  test("a batch appended at once, longer than the client's timeout, is all written", async () => {
    const c = connect(server.addr, { tls: false, timeoutMs: 1000 });
    try {
      const branch = await c.createBranch();
      const ap = c.appender(64);
      const n = 6000;
      const t0 = Date.now();
      const results = await Promise.allSettled(
        Array.from({ length: n }, (_, i) =>
          ap.append({ branchId: branch.id, input: { case: "instruction", value: { instructionValue: { case: "instruction", value: `m${i}` } } } }),
        ),
      );
      const ms = Date.now() - t0;
      await ap.close();
      const failed = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
      assert.equal(failed.length, 0, `${failed.length} of ${n} failed in ${ms} ms, the first: ${String(failed[0])}`);
      assert.equal((await branch.describe()).headSequence, BigInt(n + 1));
    } finally {
      c.close();
    }
  });

  // The rule (HistorydClient.close; README "A resuming watch"): a closed client's appenders take no
  // more items. An append waiting for a place when close() ran was woken as the item before it
  // failed, opened a new stream, on a new connection, and was written after close() (review of the
  // clients 2, fault 3).
  test("client.close() while an append waits for a place: it rejects CANCELED, unsent", { timeout: 10_000 }, async () => {
    const c = connect(server.addr, { tls: false });
    const branch = await c.createBranch();
    const instr = (text: string) => ({ branchId: branch.id, input: { case: "instruction" as const, value: { instructionValue: { case: "instruction" as const, value: text } } } });
    const ap = c.appender(1);
    await ap.append(instr("warm-up")); // the stream is open
    const inFlight = ap.append(instr("in flight")).catch(() => undefined);
    const waiting = ap.append(instr("waiting")).then(
      () => assert.fail("the waiting item was written"),
      (e: unknown) => e,
    );
    c.close();
    const err = await waiting;
    assert.ok(err instanceof HistorydError && !(err instanceof AppendStreamBrokenError), `it was not sent: ${String(err)}`);
    assert.equal(err.code, Code.Canceled);
    await inFlight;
    await ap.close();
    const texts = [];
    for await (const m of client.branch(branch.id).messages()) if (m.content.case === "instruction") texts.push(m.content.value.instructionValue.value);
    assert.ok(!texts.includes("waiting"), `written after close(): ${JSON.stringify(texts)}`);
  });
});
