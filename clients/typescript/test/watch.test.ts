// WatchBranch through the package's resuming watch, against the real historyd binary: while ANOTHER
// PROCESS writes (issue 8), across a forced disconnect that a TCP proxy in the test cuts (issue 20:
// "a watch with a forced disconnect and resume"), and its typed ends (HISTORY_COMPACTED,
// BRANCH_DELETED). DESIGN.md "Sequences, events and watch": replay then live with no gap and no
// duplicate, resumable from a cursor.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import {
  BranchDeletedError,
  Code,
  connect,
  ErrorReason,
  EventKind,
  HistoryCompactedError,
  HistorydError,
  type HistorydClient,
  type WatchItem,
} from "../src/index.js";
import { CuttableProxy } from "./helpers/proxy.js";
import { serveSuite, type Historyd } from "./helpers/server.js";

const writer = path.join(path.dirname(fileURLToPath(import.meta.url)), "helpers", "writer.js");

/** Runs helpers/writer.js in a child process and resolves to its report {head, ids}. */
async function write(addr: string, branchId: string, n: number, tag: string): Promise<{ head: bigint; ids: string[] }> {
  const { stdout } = await promisify(execFile)(process.execPath, [writer, addr, branchId, String(n), tag], { timeout: 30_000 });
  const report = JSON.parse(stdout) as { head: string; ids: string[] };
  return { head: BigInt(report.head), ids: report.ids };
}

/** Reads commits from the iterator until the cursor reaches `head`, checking that sequences follow
 * one another with no gap and no duplicate from `cursor` on; returns the events and the cursor. */
async function readUntil(it: AsyncIterator<WatchItem>, cursor: bigint, head: bigint, pending?: Promise<IteratorResult<WatchItem>>) {
  const events = [];
  while (cursor < head) {
    const r = await (pending ?? it.next());
    pending = undefined;
    assert.ok(!r.done, "the watch ended early");
    if (r.value.case !== "commit") continue;
    const commit = r.value.value;
    assert.equal(commit.firstSequence, cursor + 1n, "no gap, no duplicate");
    for (const ev of commit.events) {
      assert.equal(ev.sequence, ++cursor);
      events.push(ev);
    }
    assert.equal(commit.lastSequence, cursor);
  }
  return { events, cursor };
}

const addedIds = (events: { kind: EventKind; message?: { id: string } }[]) =>
  events.filter((ev) => ev.kind === EventKind.MESSAGE_ADDED).map((ev) => ev.message!.id);

describe("watch", () => {
  let server: Historyd;
  let client: HistorydClient;
  serveSuite((s, c) => ([server, client] = [s, c]));

  test("live events written by another process arrive in order, each once, then a new watch from the cursor replays what was missed", async () => {
    const branch = await client.createBranch({ user: "ts", system: "Watch me." });

    // From now (no cursor): the watch learns the cursor and the incarnation from the start frame.
    const live = branch.watch({ heartbeats: true });
    const it = live[Symbol.asyncIterator]();
    const pending = it.next();
    await live.ready; // the stream has begun: it sees every write from now on
    assert.equal(live.cursor, 1n, "from now: after the head, BRANCH_CREATED");
    assert.equal(live.incarnation, branch.info?.incarnation);
    const first = await write(server.addr, branch.id, 20, "first");
    const { events, cursor } = await readUntil(it, 1n, first.head, pending);
    assert.deepEqual(addedIds(events), first.ids, "every message the writer added, in its order");
    assert.equal(live.cursor, cursor);
    await it.return!();

    // While nobody watches, the other process writes again; a watch from the cursor with the
    // incarnation replays exactly the missed events.
    const second = await write(server.addr, branch.id, 5, "second");
    const resumed = branch.watch({ after: cursor, incarnation: live.incarnation, includeRendered: true });
    const rit = resumed[Symbol.asyncIterator]();
    const replay = await readUntil(rit, cursor, second.head);
    assert.deepEqual(addedIds(replay.events), second.ids);
    assert.equal(replay.events.at(-1)!.kind, EventKind.MESSAGE_REPLACED, "the action request gets its response's id last");
    assert.equal(replay.events[0]!.message?.rendered?.value.value, "Instruction: second 0");
    resumed.close();
    assert.deepEqual(await rit.next(), { done: true, value: undefined }, "close() ends the loop without an error");
  });

  test("a forced disconnect: the watch reconnects and resumes from its cursor, no event lost or repeated (issue 20)", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    const viaProxy = connect(proxy.addr, { tls: false });
    try {
      const branch = await client.createBranch({ system: "Cut me." });
      const watch = viaProxy.branch(branch.id).watch({ after: 0n, backoff: { initialBackoffMs: 10 } });
      const it = watch[Symbol.asyncIterator]();

      const before = await write(server.addr, branch.id, 3, "before");
      const seen = await readUntil(it, 0n, before.head);
      assert.equal(seen.events[0]!.kind, EventKind.BRANCH_CREATED, "after 0: everything retained, from BRANCH_CREATED");
      assert.equal(watch.resumes, 0);
      const connections = proxy.accepted;

      // The network drops; the server goes on taking writes that the watch has not seen.
      proxy.cut();
      const during = await write(server.addr, branch.id, 4, "during");
      const rest = await readUntil(it, seen.cursor, during.head);
      assert.deepEqual(addedIds(rest.events), during.ids, "the writes made while cut, each once, in order");
      assert.ok(watch.resumes >= 1, `the watch resumed (${watch.resumes})`);
      assert.ok(proxy.accepted > connections, "over a new connection");

      // And it is live again after the resume.
      const afterCut = await write(server.addr, branch.id, 1, "after");
      const live = await readUntil(it, rest.cursor, afterCut.head);
      assert.deepEqual(addedIds(live.events), afterCut.ids);
      watch.close();
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("a watch that cannot reconnect gives up after maxResumes with the last error (UNAVAILABLE)", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    const viaProxy = connect(proxy.addr, { tls: false });
    try {
      const branch = await client.createBranch();
      proxy.refuseNext(1000); // every connection is dropped on arrival
      const watch = viaProxy.branch(branch.id).watch({ after: 0n, maxResumes: 2, backoff: { initialBackoffMs: 5 } });
      await assert.rejects(watch[Symbol.asyncIterator]().next(), (err: unknown) => {
        assert.ok(err instanceof HistorydError, `got ${String(err)}`);
        assert.equal(err.code, Code.Unavailable);
        return true;
      });
      assert.equal(watch.resumes, 2, "two resumes, then the third failure is the caller's");
      await assert.rejects(watch.ready, "ready rejects when the watch ends before its stream began");
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("a cursor of another incarnation ends the watch with HistoryCompactedError (OUT_OF_RANGE)", async () => {
    const branch = await client.createBranch();
    const stale = branch.watch({ after: 0n, incarnation: "00000000-0000-4000-8000-000000000000" });
    await assert.rejects(stale[Symbol.asyncIterator]().next(), (err: unknown) => {
      assert.ok(err instanceof HistoryCompactedError, `got ${String(err)}`);
      assert.equal(err.code, Code.OutOfRange);
      assert.equal(err.reason, ErrorReason.HISTORY_COMPACTED);
      assert.equal(err.reasonName, "ERROR_REASON_HISTORY_COMPACTED");
      assert.equal(err.info.branchId, branch.id);
      assert.equal(stale.resumes, 0, "never resumed: a compacted cursor is the caller's (no silent restart)");
      return true;
    });
  });

  test("a deleted branch: the BRANCH_DELETED commit, then BranchDeletedError", async () => {
    const branch = await client.createBranch();
    const watch = branch.watch({ after: 1n });
    const it = watch[Symbol.asyncIterator]();
    const pending = it.next();
    await watch.ready; // the stream is open: the deletion comes to it as a commit
    const deleted = branch.delete();
    const r = await pending;
    assert.ok(!r.done && r.value.case === "commit");
    assert.equal(r.value.value.events[0]!.kind, EventKind.BRANCH_DELETED);
    await deleted;
    await assert.rejects(it.next(), (err: unknown) => {
      assert.ok(err instanceof BranchDeletedError, `got ${String(err)}`);
      assert.equal(err.code, Code.NotFound);
      assert.equal(err.reason, ErrorReason.BRANCH_DELETED);
      return true;
    });
  });

  // The rule (HistorydClient.close: "calls in flight fail"): closing the client ends its watches
  // and appenders. connect-node reports the connection close() drops as a lost connection, so a
  // watch resumed, the session manager opened a new connection for it, and the watch went on,
  // keeping the process alive; an appender opened a new stream for its next item.
  test("close() ends a watch in progress, CANCELED, without a resume; an appender refuses items", async () => {
    const own = connect(server.addr, { tls: false });
    const branch = await own.createBranch();
    const watch = branch.watch({ after: 0n, backoff: { initialBackoffMs: 1 } });
    const it = watch[Symbol.asyncIterator]();
    assert.ok(!(await it.next()).done);
    const pending = it.next();
    const ap = own.appender(4);
    own.close();
    let timer: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      pending.then(
        (r) => `yielded ${JSON.stringify(r.done)}`,
        (e: unknown) => e,
      ),
      new Promise((resolve) => (timer = setTimeout(() => resolve("still watching 5 s after close()"), 5000))),
    ]).finally(() => clearTimeout(timer));
    watch.close(); // in case it went on
    assert.ok(ended instanceof HistorydError, String(ended));
    assert.equal(ended.code, Code.Canceled, String(ended));
    assert.equal(watch.resumes, 0);
    await assert.rejects(ap.append({ branchId: branch.id }), (err: unknown) => err instanceof HistorydError && err.code === Code.Canceled);
    await ap.close();
  });
});
