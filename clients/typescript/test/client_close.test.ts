// A closed client, against the real historyd binary through a TCP proxy that counts the connections
// it accepts: after client.close(), every call (unary through the conveniences or the generated
// stubs, a stream, a watch, an inbox subscription, an append) fails at once with the closed
// client's HistorydError, CANCELED, and opens no connection; a unary call pausing between retries
// when the client is closed ends at once too, without another attempt.
//
// Before, close() aborted connect-node's session manager, whose next request opened a new
// connection: a unary call after close() reconnected and was answered, and a retry after close()
// did the same. A call already in flight at close() reconnected too, and was answered: one made in
// the same tick, one held by an async interceptor, one waiting for keepalive's ping of an idle
// connection; the connections themselves are now refused once the client is closed.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type { Interceptor } from "@connectrpc/connect";

import { type Branch, Code, connect, type HistorydClient, HistorydError } from "../src/index.js";
import { limitMs, within } from "./helpers/fake_server.js";
import { CuttableProxy } from "./helpers/proxy.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

/** How many microtask steps after a call close() is tried at: past the steps a call takes through
 * Connect's interceptors and the session manager to its stream. */
const microtaskSteps = 16;

/** An AddMessage's input: an instruction. */
const instruction = (text: string) => ({ case: "instruction" as const, value: { instructionValue: { case: "instruction" as const, value: text } } });

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
      await closedError(ap.append({ branchId: branch.id, input: instruction("x") }), "an append");
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

  // A call made just before close() may be anywhere on its way to the transport when close()
  // comes: in Connect's interceptor chain, or in the session manager awaiting its connection. It
  // fails with the closed client's error, and no connection is opened for it. Before, a call past
  // the closed-client interceptor reconnected: connect-node's session manager opens a new
  // connection for a request it still holds once the old one is gone.
  test("a call made just before close() fails with the closed client's error and opens no connection", async () => {
    const kinds = {
      "a convenience's unary call": (c: HistorydClient, b: Branch) => b.describe(),
      "a generated stub's unary call": (c: HistorydClient, b: Branch) => c.history.getBranch({ branchId: b.id }),
      "a generated stub's stream": (c: HistorydClient, b: Branch) => first(c.history.watchBranch({ branchId: b.id })),
      "a watch": (c: HistorydClient, b: Branch) => first(b.watch({ after: 0n })),
      "an append": (c: HistorydClient, b: Branch) => c.appender().append({ branchId: b.id, input: instruction("x") }),
    };
    const wrong: string[] = [];
    for (const [kind, call] of Object.entries(kinds)) {
      // close() after k microtasks: the call is then at one step or another on its way.
      for (let k = 0; k < microtaskSteps; k++) {
        const proxy = await CuttableProxy.start(server.addr);
        const client = connect(proxy.addr, { tls: false });
        try {
          const branch = await client.createBranch();
          const p = call(client, branch);
          for (let i = 0; i < k; i++) await Promise.resolve();
          client.close();
          const what = `${kind}, close() ${k} microtasks after it`;
          const outcome = await within(
            p.then(
              () => "answered",
              (e: unknown) => e,
            ),
            limitMs,
            what,
          );
          const closedErr = outcome instanceof HistorydError && outcome.code === Code.Canceled && /client was closed/.test(outcome.message);
          if (!closedErr || proxy.accepted !== 1) wrong.push(`${what}: ${closedErr ? "the closed client's error" : String(outcome)}, ${proxy.accepted} connections`);
        } finally {
          client.close();
          await proxy.close();
        }
      }
    }
    assert.deepEqual(wrong, [], "every call fails with the closed client's error, on the one connection");
  });

  // The `interceptors` option's interceptors run after the closed-client check; one that awaits
  // (an async token refresh, say) passes the call to the transport after close().
  test("a call held by an async interceptor at close() fails with the closed client's error and opens no connection", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    let hold = false;
    let entered!: () => void;
    const inInterceptor = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const asyncToken: Interceptor = (next) => async (req) => {
      if (hold) {
        entered();
        await released;
      }
      return next(req);
    };
    const client = connect(proxy.addr, { tls: false, interceptors: [asyncToken] });
    try {
      const branch = await client.createBranch();
      assert.equal(proxy.accepted, 1);
      hold = true;
      const call = branch.describe();
      await within(inInterceptor, limitMs, "the call in the interceptor");
      client.close();
      release();
      await closedError(call, "the call held by the interceptor");
      assert.equal(proxy.accepted, 1, "no connection opened after close()");
    } finally {
      client.close();
      await proxy.close();
    }
  });

  // With keepalive, connect-node verifies a connection idle for longer than timeMs with a ping
  // before it sends the next call on it, and opens a new connection when the ping fails: close()
  // fails the ping.
  test("a call waiting for keepalive's ping of an idle connection at close() fails with the closed client's error and opens no connection", async () => {
    const proxy = await CuttableProxy.start(server.addr);
    const timeMs = 100;
    const client = connect(proxy.addr, { tls: false, keepalive: { timeMs, timeoutMs: 10_000 } });
    try {
      const branch = await client.createBranch();
      assert.equal(proxy.accepted, 1);
      // Not a synchronisation: the connection must have been idle for timeMs to be verified.
      await new Promise((resolve) => setTimeout(resolve, 2 * timeMs));
      proxy.freeze(); // the ping goes unanswered
      const pings = proxy.clientPings;
      const call = branch.describe();
      await proxy.waitClientPings(pings + 1, limitMs);
      client.close();
      await closedError(call, "the call waiting for the ping");
      assert.equal(proxy.accepted, 1, "no connection opened after close()");
    } finally {
      client.close();
      await proxy.close();
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
