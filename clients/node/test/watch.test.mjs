// WatchBranch from Node.js while ANOTHER PROCESS writes to the branch, against the real historyd
// binary (issue 8: "watches the branch while another process writes"; DESIGN.md "Sequences, events
// and watch": replay then live with no gap and no duplicate, resumable from a cursor).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { connect } from '../lib/historyd.mjs';
import { startHistoryd } from '../lib/server.mjs';

const writer = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'writer.mjs');

/** Runs lib/writer.mjs in a child process and resolves to its report {head, ids}. */
async function write(addr, branchId, n, tag) {
  const { stdout } = await promisify(execFile)(process.execPath, [writer, addr, branchId, String(n), tag], { timeout: 30_000 });
  return JSON.parse(stdout);
}

/** Opens a WatchBranch stream and returns {frames: async next(), cancel()}. */
function watch(client, req) {
  const stream = client.history.WatchBranch(req);
  const queue = [];
  let wake;
  let failure;
  stream.on('data', (f) => {
    queue.push(f);
    wake?.();
  });
  stream.on('error', (err) => {
    failure = err;
    wake?.();
  });
  return {
    async next() {
      while (queue.length === 0) {
        if (failure) throw failure;
        await new Promise((resolve) => (wake = resolve));
      }
      return queue.shift();
    },
    async cancel() {
      const ended = once(stream, 'error').catch(() => {});
      stream.cancel();
      await ended; // CANCELLED
    },
  };
}

describe('watch', () => {
  let server;
  let client;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr);
  });
  after(async () => {
    client?.close();
    assert.equal(await server?.stop(), 0);
  });

  test('live events written by another process arrive in order, each once, then a resume replays what was missed', async () => {
    const created = await client.history.CreateBranch({ user: 'node', system: { system_message: 'Watch me.' } });
    const branchId = created.branch.id;

    // From now (no cursor): the start frame confirms the cursor, the head and the incarnation.
    const live = watch(client, { branch_id: branchId });
    const start = await live.next();
    assert.equal(start.frame, 'start', 'the first frame is start (WatchBranch guarantees)');
    assert.equal(start.start.after_sequence, '1', 'from now: after the head, BRANCH_CREATED');
    assert.equal(start.start.incarnation, created.branch.incarnation);

    // Another process writes 20 instructions, an assistant response and an action pair.
    const first = await write(server.addr, branchId, 20, 'first');
    let cursor = 1;
    const added = [];
    while (cursor < Number(first.head)) {
      const frame = await live.next();
      if (frame.frame !== 'commit') continue; // a heartbeat carries no events
      assert.equal(frame.commit.first_sequence, String(cursor + 1), 'no gap, no duplicate');
      for (const ev of frame.commit.events) {
        assert.equal(ev.sequence, String(++cursor));
        if (ev.kind === 'EVENT_KIND_MESSAGE_ADDED') added.push(ev.message.id);
      }
      assert.equal(frame.commit.last_sequence, String(cursor));
    }
    assert.equal(cursor, Number(first.head));
    assert.deepEqual(added, first.ids, "every message the writer added, in its order");
    await live.cancel();

    // While nobody watches, the other process writes again; a watch resumed from the cursor with the
    // incarnation replays exactly the missed events.
    const second = await write(server.addr, branchId, 5, 'second');
    const resumed = watch(client, { branch_id: branchId, after_sequence: String(cursor), incarnation: start.start.incarnation, include_rendered: true });
    const again = await resumed.next();
    assert.equal(again.start.after_sequence, String(cursor));
    const replayed = [];
    while (cursor < Number(second.head)) {
      const frame = await resumed.next();
      if (frame.frame !== 'commit') continue;
      for (const ev of frame.commit.events) {
        assert.equal(ev.sequence, String(++cursor));
        replayed.push(ev);
      }
    }
    assert.deepEqual(
      replayed.filter((ev) => ev.kind === 'EVENT_KIND_MESSAGE_ADDED').map((ev) => ev.message.id),
      second.ids,
    );
    assert.equal(replayed.at(-1).kind, 'EVENT_KIND_MESSAGE_REPLACED', "the action request gets its response's id last");
    assert.equal(replayed[0].message.rendered.text, 'Instruction: second 0');
    await resumed.cancel();
  });

  test('a cursor from another incarnation is OUT_OF_RANGE, HISTORY_COMPACTED', async () => {
    const created = await client.history.CreateBranch({});
    const stale = watch(client, {
      branch_id: created.branch.id,
      after_sequence: '0',
      incarnation: '00000000-0000-4000-8000-000000000000',
    });
    await assert.rejects(stale.next(), (err) => {
      assert.equal(err.code, 11, 'OUT_OF_RANGE');
      assert.equal(err.errorInfo?.reason, 'ERROR_REASON_HISTORY_COMPACTED');
      return true;
    });
  });
});
