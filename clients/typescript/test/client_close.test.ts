// A closed client, against the real historyd binary through a TCP proxy that counts the connections
// it accepts: after client.close(), every call (unary through the conveniences or the generated
// stubs, a stream, a watch, an inbox subscription, an append) fails at once with the closed
// client's HistorydError, CANCELED, and opens no connection; a unary call pausing between retries
// when the client is closed ends at once too, without another attempt.
//
// Before, close() aborted connect-node's session manager, whose next request opened a new
// connection: a unary call after close() reconnected and was answered, and a retry after close()
// did the same.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type { Interceptor } from "@connectrpc/connect";

import { Code, connect, HistorydError } from "../src/index.js";
import { CuttableProxy } from "./helpers/proxy.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

/** What a test may take at most: a closed client's calls fail at once. */
const limitMs = 5000;

/** p, or a rejection after ms: a promise that never settles fails the test instead of hanging it. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Asserts that p rejects with the closed client's error (CANCELED, "closed"), within limitMs. */
async function closedError(p: Promise<unknown>, what: string): Promise<void> {
  const err = await within(
    p.then(
      (v: unknown) => assert.fail(`${what}: answered after close() (${(v as object | undefined)?.constructor?.name ?? typeof v})`),
      (e: unknown) => e,
    ),
    limitMs,
    what,
  );
  assert.ok(err instanceof HistorydError, `${what}: ${String(err)}`);
  assert.equal(err.code, Code.Canceled, `${what}: ${String(err)}`);
  assert.match(err.message, /client was closed/, what);
}

/** The first item of an async iterable (it must throw). */
async function first(it: AsyncIterable<unknown>): Promise<unknown> {
  for await (const v of it) return v;
  throw new Error("the stream ended without an item or an error");
}

describe("a closed client", () => {
  let server: Historyd;
  before(async () => {
    server = await startHistoryd();
  });
  after(async () => {
    assert.equal(await server?.stop(), 0);
  });

  test("every call after close() fails at once, CANCELED, and opens no connection", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    const client = connect(proxy.addr, { tls: false });
    try {
      const branch = await client.createBranch();
      assert.equal(proxy.accepted, 1);
      client.close();
      assert.ok(client.closed);
      await closedError(branch.describe(), "a convenience's unary call");
      await closedError(client.history.getBranch({ branchId: branch.id }), "a generated stub's unary call");
      await closedError(client.exchange.register(randomUUID()), "a call that is never retried");
      await closedError(first(client.history.watchBranch({ branchId: branch.id })), "a generated stub's stream");
      await closedError(first(branch.watch({ after: 0n })), "a watch");
      await closedError(first(client.exchange.subscribeInbox(randomUUID())), "an inbox subscription");
      const ap = client.appender();
      await closedError(ap.append({ branchId: branch.id, input: { case: "instruction", value: { instructionValue: { case: "instruction", value: "x" } } } }), "an append");
      await within(ap.close(), limitMs, "the appender's close()");
      assert.equal(proxy.accepted, 1, "no connection opened after close()");
    } finally {
      client.close();
      await proxy.close();
    }
  });

  test("a stream in flight at close() fails with the closed client's error, not as a lost connection", async () => {
    const client = connect(server.addr, { tls: false });
    try {
      const branch = await client.createBranch();
      const it = client.history.watchBranch({ branchId: branch.id })[Symbol.asyncIterator]();
      const start = await within(it.next(), limitMs, "the start frame");
      assert.equal(start.value?.frame.case, "start");
      const next = it.next();
      client.close();
      await closedError(next, "the stream in flight");
    } finally {
      client.close();
    }
  });

  test("a unary call pausing between retries ends at close(), CANCELED, with no other attempt", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    let attempts = 0;
    let failedOnce!: () => void;
    const firstFailed = new Promise<void>((resolve) => (failedOnce = resolve));
    const count: Interceptor = (next) => async (req) => {
      attempts++;
      try {
        return await next(req);
      } catch (e) {
        failedOnce(); // the retry interceptor pauses from here
        throw e;
      }
    };
    // A pause long enough that the test sees the call end at close(), not at its next attempt.
    const client = connect(proxy.addr, { tls: false, interceptors: [count], retry: { initialBackoffMs: 2000, jitter: 0 } });
    try {
      proxy.refuseNext(1);
      const call = client.branch(randomUUID()).describe();
      await within(firstFailed, limitMs, "the first attempt's failure");
      const t0 = performance.now();
      client.close();
      await closedError(call, "the call pausing between retries");
      assert.ok(performance.now() - t0 < 1000, "it ended at close(), not after its pause");
      assert.equal(attempts, 1, "no attempt after close()");
      assert.equal(proxy.accepted, 1, "no connection opened after close()");
    } finally {
      client.close();
      await proxy.close();
    }
  });
});
