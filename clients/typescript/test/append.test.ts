// The pipelined append stream through the package's Appender (issue 21: "the Python and TypeScript
// clients wrap it too"), against the real historyd binary: answers in the order appended, items on
// a branch applied in that order, a failed item failing alone with its typed error.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { connect, ErrorReason, HistorydError, type HistorydClient } from "../src/index.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

describe("appender", () => {
  let server: Historyd;
  let client: HistorydClient;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr, { tls: false });
  });
  after(async () => {
    client?.close();
    assert.equal(await server?.stop(), 0);
  });

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
});
