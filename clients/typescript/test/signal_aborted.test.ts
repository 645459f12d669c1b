// A call given a signal that is aborted already ends as that signal says (a unary call or a stub's
// stream rejects CANCELED; a watch or an inbox subscription ends without an error; an append
// rejects CANCELED, unsent) and opens no connection, whatever kind of call it is: a fresh client
// through a proxy that counts the connections it accepts sees none.
//
// Before, only the inbox subscription and the appender looked at the signal first; a unary call, a
// stub's stream and a watch ended correctly but opened a connection (and sent the call) first.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { Code, connect, HistorydError, type HistorydClient } from "../src/index.js";
import { limitMs, within } from "./helpers/fake_server.js";
import { CuttableProxy } from "./helpers/proxy.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

/** The items of an async iterable, read to its end. */
async function drain(it: AsyncIterable<unknown>): Promise<unknown[]> {
  const items: unknown[] = [];
  for await (const v of it) items.push(v);
  return items;
}

/** Asserts that p rejects CANCELED within limitMs. */
async function canceled(p: Promise<unknown>, what: string): Promise<void> {
  const err = await within(
    p.then(
      () => assert.fail(`${what}: answered`),
      (e: unknown) => e,
    ),
    limitMs,
    what,
  );
  assert.ok(err instanceof HistorydError, `${what}: ${String(err)}`);
  assert.equal(err.code, Code.Canceled, `${what}: ${String(err)}`);
}

describe("a call given a signal aborted already", () => {
  let server: Historyd;
  before(async () => {
    server = await startHistoryd();
  });
  after(async () => {
    assert.equal(await server?.stop(), 0);
  });

  test("ends at once and opens no connection, whatever kind of call", async () => {
    const signal = AbortSignal.abort();
    const kinds: Record<string, (c: HistorydClient, branchId: string) => Promise<void>> = {
      "a convenience's unary call": (c, b) => canceled(c.branch(b).describe({ signal }), "a convenience's unary call"),
      "a generated stub's unary call": (c, b) => canceled(c.history.getBranch({ branchId: b }, { signal }), "a generated stub's unary call"),
      "a generated stub's stream": (c, b) => canceled(drain(c.history.watchBranch({ branchId: b }, { signal })), "a generated stub's stream"),
      "a watch": async (c, b) => assert.deepEqual(await within(drain(c.branch(b).watch({ after: 0n, signal })), limitMs, "a watch"), [], "a watch ends, with no item"),
      "an inbox subscription": async (c) => assert.deepEqual(await within(drain(c.exchange.subscribeInbox(randomUUID(), { signal })), limitMs, "an inbox subscription"), []),
      "an append": async (c, b) => {
        const ap = c.appender();
        await canceled(ap.append({ branchId: b, input: { case: "instruction", value: { instructionValue: { case: "instruction", value: "x" } } } }, { signal }), "an append");
        await within(ap.close(), limitMs, "the appender's close()");
      },
    };
    const opened: string[] = [];
    for (const [kind, call] of Object.entries(kinds)) {
      const proxy = await CuttableProxy.start(server.addr);
      const client = connect(proxy.addr, { tls: false });
      const barrier = connect(proxy.addr, { tls: false });
      try {
        await call(client, randomUUID());
        // The call ended without waiting for a connection it may have opened: a call of another
        // client, answered, makes the proxy accept whatever connection was opened before its own,
        // so the count is its own alone.
        await barrier.createBranch();
        if (proxy.accepted !== 1) opened.push(`${kind}: ${proxy.accepted - 1} connections`);
      } finally {
        client.close();
        barrier.close();
        await proxy.close();
      }
    }
    assert.deepEqual(opened, [], "no call opened a connection");
  });
});
