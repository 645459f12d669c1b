// The Appender's slot waiters and answer checks (issue 21 review, finding D), against a fake
// AppendMessages call whose answers the test gives, so the order of answers and closes is the
// test's own: close() rejects every append waiting for a slot, and a malformed answer rejects its
// item's promise instead of losing it.

import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { describe, test } from "node:test";

import { create } from "@bufbuild/protobuf";

import { Appender, AppendAbandonedError, AppendStreamBrokenError, Code, HistorydError, type HistorydClient } from "../src/index.js";
import { setLongTimeout } from "../src/timer.js";
import { MessageSchema } from "../src/gen/historyd/v1/envelope_pb.js";
import { AppendMessagesResponseSchema, type AppendMessagesResponse } from "../src/gen/historyd/v1/history_service_pb.js";
import { within } from "./helpers/fake_server.js";

/** A fake AppendMessages call: answers are given by answer(); the stream ends OK with end(), and
 * with the signal's reason when the appender cancels it. It reads the request iterable as Connect
 * does, so the appender's sends never block, and counts the items sent. */
function fakeClient() {
  const closing = new AbortController(); // the client's close signal
  const sent = { items: 0 }; // the items the appender sent (its window request aside)
  const sentWaiters: (() => void)[] = [];
  let cancelled = false; // the appender cancelled the call
  const answers: (AppendMessagesResponse | null | { cancelled: unknown })[] = [];
  let wake: (() => void) | undefined;
  const push = (a: AppendMessagesResponse | null | { cancelled: unknown }) => {
    answers.push(a);
    wake?.();
  };
  const client = {
    closeSignal: closing.signal,
    history: {
      appendMessages(reqs: AsyncIterable<unknown>, opts?: { signal?: AbortSignal }) {
        opts?.signal?.addEventListener(
          "abort",
          () => {
            cancelled = true;
            push({ cancelled: opts.signal!.reason });
          },
          { once: true },
        );
        void (async () => {
          for await (const r of reqs) {
            if ((r as { item?: unknown }).item === undefined) continue;
            sent.items++;
            for (const w of sentWaiters.splice(0)) w();
          }
        })();
        return (async function* () {
          for (;;) {
            while (answers.length === 0) await new Promise<void>((r) => (wake = r));
            const a = answers.shift()!;
            if (a === null) return;
            if ("cancelled" in a) throw a.cancelled;
            yield a;
          }
        })();
      },
    },
  } as unknown as HistorydClient;
  return {
    client,
    closeSignal: closing.signal,
    sent,
    /** Whether the appender cancelled the call. */
    get cancelled() {
      return cancelled;
    },
    /** Resolves once the transport took n items in all. */
    async whenSent(n: number) {
      while (sent.items < n) await new Promise<void>((r) => sentWaiters.push(r));
    },
    answer: (index: number, ok: boolean) =>
      push(create(AppendMessagesResponseSchema, {
        index: BigInt(index),
        result: ok ? { case: "response", value: { message: create(MessageSchema, {}) } } : { case: undefined },
      })),
    end: () => push(null),
  };
}

describe("appender slots and answers", () => {
  test("close() rejects every append waiting for a slot (finding D)", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, 1);
    const first = ap.append({ branchId: "b" });
    const waiting = [ap.append({ branchId: "b" }), ap.append({ branchId: "b" }), ap.append({ branchId: "b" })];
    const closed = ap.close();
    f.answer(0, true);
    f.end();
    await within(first, 5000, "the item in flight");
    const settled = await within(Promise.allSettled(waiting), 5000, "the appends waiting for a slot");
    for (const s of settled) {
      assert.equal(s.status, "rejected");
      assert.match(String((s as PromiseRejectedResult).reason), /closed/);
    }
    await within(closed, 5000, "close()");
  });

  test("a malformed answer rejects its item, and the stream goes on (finding D)", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, 4);
    const bad = ap.append({ branchId: "b" });
    const good = ap.append({ branchId: "b" });
    f.answer(0, false);
    f.answer(1, true);
    await assert.rejects(within(bad, 5000, "the malformed answer's item"), /malformed/);
    await within(good, 5000, "the next item");
    const closed = ap.close();
    f.end();
    await within(closed, 5000, "close()");
  });

  // The rule (appender.ts): an item is never sent once its own deadline passed; it rejects
  // DEADLINE_EXCEEDED, unsent. Woken for a place after its deadline but before its timer ran (the
  // event loop busy, as under a big batch), it was sent all the same; its timer then cancelled the
  // stream with every item on it (review of the clients 2, fault 1).
  test("an item whose own deadline passed while it waited for a place is not sent", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, 1);
    const first = ap.append({ branchId: "b" });
    const late = ap.append({ branchId: "b" }, { timeoutMs: 20 }).then(
      () => assert.fail("the late item resolved"),
      (e: unknown) => e,
    );
    // The loop is held past the late item's deadline, so its timer cannot run before the answer
    // below frees its place.
    const t0 = performance.now();
    while (performance.now() - t0 < 40);
    f.answer(0, true);
    await within(first, 5000, "the first item");
    const err = await within(late, 5000, "the late item");
    assert.ok(err instanceof HistorydError && !(err instanceof AppendStreamBrokenError), `it was not sent: ${String(err)}`);
    assert.equal(err.code, Code.DeadlineExceeded);
    assert.equal(f.sent.items, 1, "only the first item was sent");
    const closed = ap.close();
    f.end();
    await within(closed, 5000, "close()");
  });
});

describe("appender: when an item counts as sent", () => {
  // The rule (appender.ts): the appender's timeoutMs bounds the wait for an answer from when the
  // transport takes the item. Counted from append(), it ran while the caller's own synchronous
  // batch of appends kept the event loop, when nothing could be written or read: the first window
  // of a big batch ran out of time before its answers could be read.
  test("the answer's deadline starts when the transport takes the item, not during the caller's batch", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, { window: 1, timeoutMs: 20 });
    try {
      const first = ap.append({ branchId: "b" });
      const t0 = performance.now();
      while (performance.now() - t0 < 40); // the rest of a long synchronous batch of appends
      setTimeout(() => f.answer(0, true), 1); // the answer comes 1 ms after the batch
      await within(first, 5000, "the first item");
    } finally {
      const closed = ap.close();
      f.end();
      await within(closed, 5000, "close()");
    }
  });
});

describe("appender: the client's close signal", () => {
  // The rule (appender.ts #place): the appends waiting for a place wake when the client closes, by
  // one listener on its close signal. One listener a waiting append made a batch of 20,000 add
  // 20,000, each add and remove linear in their number: the batch spent seconds in them, its first
  // window's deadlines ran out meanwhile, and Node warned of a leak (MaxListenersExceededWarning).
  test("appends waiting for a place hold one listener on the client's close signal, none once done", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, 1);
    const items = Array.from({ length: 20 }, () => ap.append({ branchId: "b" }));
    assert.equal(getEventListeners(f.closeSignal, "abort").length, 1, "one listener for 19 waiting appends");
    for (let i = 0; i < items.length; i++) f.answer(i, true);
    await within(Promise.all(items), 5000, "the items' answers");
    assert.equal(getEventListeners(f.closeSignal, "abort").length, 0, "none left");
    const closed = ap.close();
    f.end();
    await within(closed, 5000, "close()");
  });
});

describe("appender deadlines longer than a timer", () => {
  // The rule (appender.ts): a deadline is honoured whatever its length. setTimeout takes at most
  // 2^31-1 ms (about 24.8 days); given more, Node warns (TimeoutOverflowWarning) and fires after
  // 1 ms: a timeoutMs of 2^31 or of 30 days failed every item DEADLINE_EXCEEDED at once, and
  // Infinity did too (review of the clients 2, fault 6).
  test("deadlines past 2^31-1 ms, and Infinity, do not fire at once", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on("warning", onWarning);
    const f = fakeClient();
    const ap = new Appender(f.client, { window: 4, timeoutMs: 2 ** 31 });
    try {
      const items = [
        ap.append({ branchId: "b" }),
        ap.append({ branchId: "b" }, { timeoutMs: 30 * 24 * 3600 * 1000 }),
        ap.append({ branchId: "b" }, { timeoutMs: Infinity }),
      ];
      await new Promise((resolve) => setImmediate(resolve)); // a warning is emitted on the next tick
      assert.deepEqual(warnings.filter((w) => w.startsWith("TimeoutOverflowWarning")), [], "no timer overflowed");
      for (let i = 0; i < items.length; i++) f.answer(i, true);
      await within(Promise.all(items), 5000, "the items' answers");
    } finally {
      process.off("warning", onWarning);
      const closed = ap.close();
      f.end(); // an item left unanswered (the test failed) rejects, and its timer goes
      await within(closed, 5000, "close()");
    }
  });

  test("a long timer is re-armed in steps until it is due", async () => {
    const t0 = performance.now();
    const fired = new Promise<number>((resolve) => setLongTimeout(() => resolve(performance.now() - t0), 35, 10));
    assert.ok((await within(fired, 5000, "the long timer")) >= 35);
    let never = false;
    const t = setLongTimeout(() => (never = true), Infinity);
    t.clear();
    assert.equal(never, false);
  });
});

describe("appender: giving up on one item", () => {
  // The rule (appender.ts): an item's own bounds, its signal and its own deadline, give up on that
  // item alone once it is on the stream, as the Python client's cancel of a sent item's future: it
  // rejects with AppendAbandonedError of the bound's code (CANCELED; DEADLINE_EXCEEDED for a
  // deadline or an AbortSignal.timeout()), the stream goes on, the other items get their answers,
  // and its own answer is dropped when it comes. Before, either bound cancelled the stream, and
  // every item in flight rejected with AppendStreamBrokenError.

  /** The error p rejects with (within 5 s); fails when it resolves. */
  async function rejection(p: Promise<unknown>, what: string): Promise<HistorydError> {
    const err = await within(
      p.then(
        () => assert.fail(`${what} resolved`),
        (e: unknown) => e,
      ),
      5000,
      what,
    );
    assert.ok(err instanceof HistorydError, `${what}: ${String(err)}`);
    return err;
  }

  for (const bound of ["its own signal", "its own AbortSignal.timeout()", "its own deadline"] as const) {
    test(`a sent item past ${bound} fails alone; the others are answered; its answer is dropped`, async () => {
      const f = fakeClient();
      const ap = new Appender(f.client, { window: 3, timeoutMs: 0 });
      const ac = new AbortController();
      const before = ap.append({ branchId: "b" });
      const mine = rejection(
        ap.append(
          { branchId: "b", requestId: "mine" },
          bound === "its own signal" ? { signal: ac.signal } : bound === "its own deadline" ? { timeoutMs: 20 } : { signal: AbortSignal.timeout(20) },
        ),
        "the item given up",
      );
      const after = ap.append({ branchId: "b" });
      await within(f.whenSent(3), 5000, "the three items sent");
      ac.abort();
      const err = await mine;
      assert.ok(err instanceof AppendAbandonedError, `it failed alone: ${String(err)}`);
      assert.equal(err.code, bound === "its own signal" ? Code.Canceled : Code.DeadlineExceeded, String(err));
      assert.equal(err.requestId, "mine", "it names the item's request id, to append it again");
      assert.equal(f.cancelled, false, "the stream goes on");
      // The window is full: the given-up item keeps its place until its answer comes.
      const fourth = ap.append({ branchId: "b" });
      for (let i = 0; i < 3; i++) f.answer(i, true);
      await within(before, 5000, "the item before it");
      await within(after, 5000, "the item after it");
      await within(f.whenSent(4), 5000, "a fourth item sent in the place given back");
      f.answer(3, true);
      await within(fourth, 5000, "the fourth item");
      const closed = ap.close();
      f.end();
      await within(closed, 5000, "close()");
    });
  }

  test("an item whose own signal fires before the transport takes it is not sent", async () => {
    const f = fakeClient();
    const ap = new Appender(f.client, { window: 4, timeoutMs: 0 });
    const ac = new AbortController();
    const first = ap.append({ branchId: "b" });
    const mine = rejection(ap.append({ branchId: "b" }, { signal: ac.signal }), "the cancelled item");
    const last = ap.append({ branchId: "b" });
    ac.abort(); // append() has returned, but the event loop has not run Connect's request pump yet
    const err = await mine;
    assert.ok(!(err instanceof AppendStreamBrokenError) && !(err instanceof AppendAbandonedError), `unsent: ${String(err)}`);
    assert.equal(err.code, Code.Canceled);
    await within(f.whenSent(2), 5000, "the other two items sent");
    f.answer(0, true);
    f.answer(1, true);
    await within(first, 5000, "the first item");
    await within(last, 5000, "the last item");
    assert.equal(f.sent.items, 2, "the cancelled item was not sent");
    assert.equal(f.cancelled, false, "the stream goes on");
    const closed = ap.close();
    f.end();
    await within(closed, 5000, "close()");
  });
});
