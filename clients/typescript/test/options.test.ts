// The client's timing options against setTimeout's range. setTimeout takes at most 2^31-1 ms:
// given more (or NaN), Node fires the timer after 1 ms. A retry policy with initialBackoffMs and
// maxBackoffMs of 2^31 therefore retried in a hot loop (5 attempts in 46 ms), and so did one whose
// pause grew past 2^31-1 ms with maxBackoffMs 0; a NaN pause of a watch never ended (setLongTimeout
// never fires a non-finite delay); a keepalive time past 2^31-1 ms was dropped (connect-node then
// never pings), and one of 0 or NaN pinged without pause. Every pause option (retry, a watch's
// backoff, keepalive) is now checked when the client or watch is made, and one out of range throws
// a RangeError naming the option and its range; a computed pause is held at 2^31-1 ms; deadlines
// (timeoutMs) take any length from 0 (none) to Infinity, as before, and refuse only NaN and
// negative values.
//
// A field given as undefined is not given: its default applies. Merged by spreading ({...defaults,
// ...given}), an explicit undefined replaced the default and passed the checks (undefined is "not
// given" there too): retry {maxAttempts: undefined} retried without end, {initialBackoffMs:
// undefined} paused NaN ms (setTimeout's 1 ms: a hot loop), a watch's backoff {initialBackoffMs:
// undefined} paused NaN ms for good (the watch never resumed), and keepalive {timeMs: undefined}
// turned keepalive off without a word.
//
// No server is needed: the calls here go to a port nothing listens on, and fail UNAVAILABLE.

import assert from "node:assert/strict";
import net from "node:net";
import { describe, test } from "node:test";

import type { Interceptor } from "@connectrpc/connect";

import { backoffMs, Code, connect, defaultKeepalive, defaultRetryPolicy, HistorydError, type ClientOptions, type WatchOptions } from "../src/index.js";
import { sessionOptions } from "../src/client.js";
import { within } from "./helpers/fake_server.js";

const maxTimerMs = 2 ** 31 - 1;

/** Asserts that fn throws a RangeError whose message names the option. */
function refused(fn: () => unknown, option: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof RangeError, `a RangeError for ${option}, got ${String(err)}`);
    assert.ok(err.message.includes(option), `the message names ${option}: ${err.message}`);
    return true;
  });
}

/** A client to nowhere: nothing here makes a call. */
const client = (options: ClientOptions) => connect("127.0.0.1:1", { tls: false, ...options });

describe("timing options", () => {
  test("a retry policy setTimeout cannot follow is refused at construction, naming the option", () => {
    const bad: [keyof typeof defaultRetryPolicy, number][] = [
      ["initialBackoffMs", 2 ** 31],
      ["initialBackoffMs", -1],
      ["initialBackoffMs", NaN],
      ["maxBackoffMs", 30 * 24 * 3600 * 1000],
      ["maxBackoffMs", Infinity],
      ["multiplier", NaN],
      ["jitter", NaN],
      ["jitter", 1.5],
      ["maxAttempts", NaN],
    ];
    for (const [field, value] of bad) refused(() => client({ retry: { [field]: value } }), `retry.${field}`);
    // The bounds themselves are allowed.
    client({ retry: { initialBackoffMs: 0, maxBackoffMs: maxTimerMs, jitter: 1, maxAttempts: Infinity } }).close();
  });

  test("a pause grown past 2^31-1 ms is held at that, not fired after 1 ms", () => {
    // maxBackoffMs 0 is no cap: the pause grows until setTimeout's longest delay.
    const p = { ...defaultRetryPolicy, initialBackoffMs: 1000, maxBackoffMs: 0, multiplier: 10, jitter: 0.2 };
    for (const attempt of [1, 7, 20, 400]) {
      const ms = backoffMs(p, attempt);
      assert.ok(ms >= 0 && ms <= maxTimerMs, `attempt ${attempt}: ${ms} ms`);
    }
    assert.ok(backoffMs(p, 400) >= maxTimerMs * 0.8, "held near the longest pause, not at 0");
  });

  test("a watch's backoff and maxResumes are checked when the watch is made", () => {
    const c = client({});
    try {
      const bad: [string, WatchOptions][] = [
        ["backoff.initialBackoffMs", { backoff: { initialBackoffMs: 2 ** 31 } }],
        ["backoff.initialBackoffMs", { backoff: { initialBackoffMs: NaN } }],
        ["backoff.maxBackoffMs", { backoff: { maxBackoffMs: -5 } }],
        ["backoff.jitter", { backoff: { jitter: -0.1 } }],
        ["maxResumes", { maxResumes: NaN }],
        ["maxResumes", { maxResumes: -1 }],
      ];
      for (const [option, o] of bad) refused(() => c.branch("b").watch(o), option);
      c.branch("b").watch({ backoff: { initialBackoffMs: 0, maxBackoffMs: maxTimerMs }, maxResumes: Infinity });
    } finally {
      c.close();
    }
  });

  test("keepalive times setTimeout cannot follow are refused at construction", () => {
    const bad: [string, number][] = [
      ["timeMs", 2 ** 31],
      ["timeMs", 0],
      ["timeMs", NaN],
      ["timeoutMs", Infinity],
      ["timeoutMs", -1],
    ];
    for (const [field, value] of bad) refused(() => client({ keepalive: { [field]: value } }), `keepalive.${field}`);
    client({ keepalive: { timeMs: maxTimerMs, timeoutMs: 1 } }).close();
  });

  test("deadlines take 0 (none) to Infinity, and refuse NaN and negative values", async () => {
    refused(() => client({ timeoutMs: NaN }), "timeoutMs");
    refused(() => client({ timeoutMs: -1 }), "timeoutMs");
    const c = client({ timeoutMs: Infinity });
    try {
      client({ timeoutMs: 0 }).close();
      client({ timeoutMs: 2 ** 31 }).close();
      refused(() => c.appender({ timeoutMs: NaN }), "timeoutMs");
      refused(() => c.appender({ timeoutMs: -1 }), "timeoutMs");
      c.appender({ timeoutMs: Infinity });
      const ap = c.appender();
      await assert.rejects(ap.append({ branchId: "b" }, { timeoutMs: NaN }), (err: unknown) => {
        assert.ok(err instanceof RangeError, String(err));
        assert.match(err.message, /timeoutMs/);
        return true;
      });
      await ap.close();
    } finally {
      c.close();
    }
  });
});

/** host:port of a loopback port nothing listens on: a connection to it is refused at once. */
async function nowhere(): Promise<string> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `127.0.0.1:${port}`;
}

describe("timing options given as undefined", () => {
  /** A unary call (read-only: retried) to nowhere with the retry policy given: how many attempts
   * it made, how long they took, and its error. */
  async function unavailableCall(retry: ClientOptions["retry"]): Promise<{ attempts: number; ms: number; err: unknown }> {
    let attempts = 0;
    const count: Interceptor = (next) => (req) => {
      attempts++;
      return next(req);
    };
    const c = connect(await nowhere(), { tls: false, interceptors: [count], retry });
    try {
      const t0 = performance.now();
      // The signal bounds a policy that retries without end.
      const err = await c.branch("b").describe({ signal: AbortSignal.timeout(3000) }).catch((e: unknown) => e);
      return { attempts, ms: performance.now() - t0, err };
    } finally {
      c.close();
    }
  }

  test("retry: maxAttempts undefined keeps its default, 5 attempts", async () => {
    const { attempts, err } = await unavailableCall({ maxAttempts: undefined, initialBackoffMs: 1, maxBackoffMs: 1 });
    assert.equal(attempts, defaultRetryPolicy.maxAttempts, `attempts, ending with ${String(err)}`);
    assert.ok(err instanceof HistorydError && err.code === Code.Unavailable, String(err));
  });

  test("retry: initialBackoffMs undefined keeps its default, 50 ms doubling", async () => {
    // 3 attempts, pauses of 50 and 100 ms without jitter; NaN pauses (1 ms each) took a few ms.
    const { attempts, ms, err } = await unavailableCall({ initialBackoffMs: undefined, maxBackoffMs: undefined, multiplier: undefined, jitter: 0, maxAttempts: 3 });
    assert.equal(attempts, 3, String(err));
    assert.ok(ms >= 145, `the pauses took ${ms.toFixed(1)} ms, not 150`);
  });

  test("a watch's backoff: initialBackoffMs undefined keeps its default, and the watch resumes", async () => {
    const c = connect(await nowhere(), { tls: false });
    try {
      // Each stream fails UNAVAILABLE: the watch pauses, resumes once, and gives up with that error.
      const watch = c.branch("b").watch({ after: 0n, maxResumes: 1, backoff: { initialBackoffMs: undefined } });
      const err = await within(
        (async () => {
          for await (const _ of watch);
        })().then(
          () => assert.fail("the watch ended without an error"),
          (e: unknown) => e,
        ),
        5000,
        "the watch's pause between resumes",
      );
      assert.ok(err instanceof HistorydError && err.code === Code.Unavailable, String(err));
      assert.equal(watch.resumes, 1);
    } finally {
      c.close();
    }
  });

  test("keepalive: times undefined keep their defaults, and keepalive stays on", () => {
    const o = sessionOptions({ timeMs: undefined, timeoutMs: undefined, permitWithoutCalls: undefined });
    assert.equal(o?.pingIntervalMs, defaultKeepalive.timeMs);
    assert.equal(o?.pingTimeoutMs, defaultKeepalive.timeoutMs);
    assert.equal(o?.pingIdleConnection, defaultKeepalive.permitWithoutCalls);
  });

  test("the client's and an appender's timeoutMs undefined keep their defaults", () => {
    const c = client({ timeoutMs: undefined });
    try {
      assert.equal(c.timeoutMs, 30_000);
      c.appender({ timeoutMs: undefined, window: undefined });
    } finally {
      c.close();
    }
  });
});
