// BranchWatch against scripted WatchBranch streams (as the Go client's
// watch_deleted_internal_test.go), so that how each stream ends is the test's own: here a
// connection lost right after the BRANCH_DELETED commit, before the stream's own end.

import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { describe, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";

import { BranchDeletedError, BranchWatch, Code, connect, ErrorReason, EventKind, HistorydError, type HistorydClient } from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { WatchBranchResponseSchema, type WatchBranchResponse } from "../src/gen/historyd/v1/history_service_pb.js";
import { within } from "./helpers/fake_server.js";

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

describe("watch, scripted: the caller's signal", () => {
  // The rule (BranchWatch; exchange.ts subscribeInbox does the same): a watch that has ended holds
  // nothing on the caller's signal. Its abort listener stayed on the signal for good, keeping the
  // watch and its client reachable: a program that passes one long-lived signal (its shutdown
  // signal) to every watch leaked one listener a watch, and Node warned of a likely leak
  // (MaxListenersExceededWarning) from the eleventh.
  test("a watch that ended, by an error or a break, leaves no listener on the signal", async () => {
    const ac = new AbortController();
    const commit = create(WatchBranchResponseSchema, {
      frame: { case: "commit", value: { firstSequence: 5n, lastSequence: 5n, events: [{ sequence: 5n, kind: EventKind.MESSAGE_ADDED }] } },
    });
    for (let i = 0; i < 12; i++) {
      const { client } = scriptedClient([{ frames: [start, commit], end: reasonError(Code.OutOfRange, "ERROR_REASON_HISTORY_COMPACTED") }]);
      const watch = new BranchWatch(client, "b", { after: 4n, signal: ac.signal });
      if (i % 2 === 0) {
        await assert.rejects(within((async () => { for await (const _ of watch); })(), 5000, "the watch's end"), /HISTORY_COMPACTED/);
      } else {
        for await (const _ of watch) break;
      }
    }
    assert.equal(getEventListeners(ac.signal, "abort").length, 0, "listeners left on the caller's signal");
  });

  test("the signal still ends a watch in progress", async () => {
    const ac = new AbortController();
    // A stream that yields its start frame and then waits until its call is aborted.
    const waiting = {
      history: {
        watchBranch(_req: unknown, opts: { signal: AbortSignal }) {
          return (async function* () {
            yield start;
            await new Promise<void>((resolve) => opts.signal.addEventListener("abort", () => resolve(), { once: true }));
            throw new ConnectError("aborted", Code.Canceled);
          })();
        },
      },
    } as unknown as HistorydClient;
    const watch = new BranchWatch(waiting, "b", { after: 4n, signal: ac.signal });
    const done = (async () => {
      const items = [];
      for await (const item of watch) items.push(item);
      return items;
    })();
    await within(watch.ready, 5000, "the watch's start");
    ac.abort();
    assert.deepEqual(await within(done, 5000, "the watch's end at the signal"), []);
    assert.equal(getEventListeners(ac.signal, "abort").length, 0);
  });
});

describe("watch, scripted: the client's close", () => {
  // The rule (HistorydClient.close; README "A resuming watch"): client.close() ends a watch with
  // HistorydError CANCELED instead of resuming it. A watch pausing between resumes when close() was
  // called slept out its pause and then resumed, on a new connection, and went on after close()
  // (review of the clients 2, fault 2).
  test("client.close() during the pause between resumes ends the watch at once, CANCELED, without a resume", async () => {
    const client = connect("127.0.0.1:1", { tls: false }); // never dialled: its WatchBranch is scripted
    let calls = 0;
    let called!: () => void;
    const firstCall = new Promise<void>((resolve) => (called = resolve));
    (client as unknown as { history: unknown }).history = {
      watchBranch() {
        calls++;
        called();
        return (async function* () {
          yield start;
          throw new ConnectError("connection reset (test)", Code.Unavailable);
        })();
      },
    };
    const watch = new BranchWatch(client, "b", { after: 4n, backoff: { initialBackoffMs: 30_000, maxBackoffMs: 30_000, jitter: 0 } });
    try {
      const next = watch[Symbol.asyncIterator]().next();
      await within(firstCall, 5000, "the first WatchBranch");
      await new Promise((resolve) => setImmediate(resolve)); // its stream failed: the watch pauses 30 s
      client.close();
      await assert.rejects(within(next, 5000, "the watch's end at close()"), (err: unknown) => {
        assert.ok(err instanceof HistorydError, String(err));
        assert.equal(err.code, Code.Canceled, String(err));
        return true;
      });
      assert.equal(calls, 1, "no WatchBranch after close()");
      assert.equal(watch.resumes, 0);
    } finally {
      watch.close();
    }
  });
});
