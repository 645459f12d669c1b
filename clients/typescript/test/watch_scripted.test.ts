// BranchWatch against scripted WatchBranch streams (as the Go client's
// watch_deleted_internal_test.go), so that how each stream ends is the test's own: here a
// connection lost right after the BRANCH_DELETED commit, before the stream's own end.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";

import { BranchDeletedError, BranchWatch, Code, ErrorReason, EventKind, type HistorydClient } from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { WatchBranchResponseSchema, type WatchBranchResponse } from "../src/gen/historyd/v1/history_service_pb.js";

interface Script {
  frames: WatchBranchResponse[];
  end: Error;
}

/** A client whose WatchBranch plays the next script each call (the last one again when they run out). */
function scriptedClient(scripts: Script[]) {
  const state = { calls: 0 };
  const client = {
    history: {
      watchBranch(_req: unknown, _opts: unknown) {
        const script = scripts[Math.min(state.calls, scripts.length - 1)]!;
        state.calls++;
        return (async function* () {
          yield* script.frames;
          throw script.end;
        })();
      },
    },
  } as unknown as HistorydClient;
  return { client, state };
}

/** p, or a rejection after ms: a promise that never settles fails the test instead of hanging it. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

const start = create(WatchBranchResponseSchema, { frame: { case: "start", value: { incarnation: "inc", afterSequence: 4n } } });
const deletion = create(WatchBranchResponseSchema, {
  frame: { case: "commit", value: { firstSequence: 5n, lastSequence: 5n, events: [{ sequence: 5n, kind: EventKind.BRANCH_DELETED }] } },
});
const reasonError = (code: Code, reason: string) =>
  new ConnectError(`${reason} (test)`, code, undefined, [{ desc: ErrorInfoSchema, value: { reason, domain: "historyd", metadata: { branchId: "b" } } }]);

describe("watch, scripted", () => {
  // The rule (Branch.watch; errors.ts BranchDeletedError): the watch ends with BranchDeletedError
  // after the branch's BRANCH_DELETED commit. When the connection dropped between that commit and
  // the stream's NOT_FOUND status, the stream ended UNAVAILABLE, the watch resumed, and the caller
  // got what the reconnection found (BRANCH_NOT_FOUND, or HISTORY_COMPACTED). The Go client
  // remembers the deletion it yielded and ends there (client/watch.go, deleted); so does this one
  // (review of the clients, fault 5).
  test("a connection lost after the BRANCH_DELETED commit still ends with BranchDeletedError, without a resume", async () => {
    const { client, state } = scriptedClient([
      { frames: [start, deletion], end: new ConnectError("connection reset (test)", Code.Unavailable) },
      { frames: [], end: reasonError(Code.NotFound, "ERROR_REASON_BRANCH_NOT_FOUND") },
    ]);
    const watch = new BranchWatch(client, "b", { after: 4n, backoff: { initialBackoffMs: 0 } });
    const it = watch[Symbol.asyncIterator]();
    const r = await within(it.next(), 5000, "the deletion's commit");
    assert.ok(!r.done && r.value.case === "commit");
    assert.equal(r.value.value.events[0]!.kind, EventKind.BRANCH_DELETED);
    await assert.rejects(within(it.next(), 5000, "the watch's end"), (err: unknown) => {
      assert.ok(err instanceof BranchDeletedError, `got ${String(err)}`);
      assert.equal(err.code, Code.NotFound);
      assert.equal(err.reason, ErrorReason.BRANCH_DELETED);
      assert.deepEqual(err.info, { branchId: "b", lastSequence: "5" });
      return true;
    });
    assert.equal(state.calls, 1, "no reconnection after the deletion: it could only find the branch gone");
    assert.equal(watch.resumes, 0);
  });
});
