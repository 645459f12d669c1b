// The Appender's bounds against a stalled server: a fake historyd (a bare node:http2 server) whose
// AppendMessages takes the stream and its items and never answers, not even with headers, as a
// server stuck behind a lock or a proxy that swallows its answers would. An item unanswered by the
// appender's deadline rejects DEADLINE_EXCEEDED, the stream is cancelled (the fake sees it reset),
// the window's places come back and close() returns; an append that waits for a place past its
// deadline rejects unsent; the appender's signal ends it all, CANCELED; an item's own signal gives
// up on that item alone, and the appender's deadline still ends the stall.
//
// Before the bounds, the promises stayed pending until the client closed, and close() never
// returned: nothing bounded an item but the caller's own patience.

import assert from "node:assert/strict";
import http2 from "node:http2";
import { describe, test } from "node:test";

import { AppendAbandonedError, AppendStreamBrokenError, Code, connect, HistorydError } from "../src/index.js";
import { FakeServer, limitMs, within } from "./helpers/fake_server.js";

/** A gRPC server in name only: every stream is accepted and left unanswered; it counts the streams
 * opened, the bytes of requests read, and the streams the client ended. */
class StalledServer extends FakeServer {
  opened = 0;
  bytes = 0;
  /** The gRPC messages read (each stream's window request and items). */
  messages = 0;

  static start(): Promise<StalledServer> {
    return new StalledServer().listen();
  }

  protected handle(stream: http2.ServerHttp2Stream): void {
    this.opened++;
    let buf = Buffer.alloc(0);
    stream.on("data", (chunk: Buffer) => {
      this.bytes += chunk.length;
      // gRPC's framing: a flag byte and a 4-byte length before each message.
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        buf = buf.subarray(5 + buf.readUInt32BE(1));
        this.messages++;
        this.notify();
      }
    });
  }

  /** Resolves once n gRPC messages in all have been read (within limitMs, else rejects). */
  async waitMessages(n: number): Promise<void> {
    await this.waitUntil(() => this.messages >= n, `${n} messages read`);
  }
}

/** The error p rejects with (within limitMs); fails when it resolves. Called as soon as p is made,
 * so that no rejection is ever unhandled. */
async function rejection(p: Promise<unknown>, what: string): Promise<HistorydError> {
  const err = await within(
    p.then(
      () => assert.fail(`${what} resolved`),
      (e: unknown) => e,
    ),
    limitMs,
    what,
  );
  assert.ok(err instanceof HistorydError, `${what}: ${String(err)}`);
  return err;
}

const instr = (text: string) => ({ branchId: "00000000-0000-4000-8000-000000000001", input: { case: "instruction" as const, value: { instructionValue: { case: "instruction" as const, value: text } } } });

describe("appender bounds against a stalled server", () => {
  test("items fail DEADLINE_EXCEEDED at the client's timeout; the stream is cancelled; the window frees", async () => {
    const fake = await StalledServer.start();
    const client = connect(fake.addr, { tls: false, timeoutMs: 300 });
    try {
      const t0 = Date.now();
      const ap = client.appender(2);
      const first = [rejection(ap.append(instr("m0")), "item 0"), rejection(ap.append(instr("m1")), "item 1")];
      for (const [i, p] of first.entries()) {
        const err = await p;
        assert.ok(err instanceof AppendStreamBrokenError, `item ${i} may have been applied: ${String(err)}`);
        assert.equal(err.code, Code.DeadlineExceeded, String(err));
        assert.ok(err.requestId);
      }
      await fake.waitEnded(1); // the stream was cancelled
      // The window is free again: a third item gets a place at once, on a new stream, and meets its
      // own deadline there.
      const third = await rejection(ap.append(instr("m2")), "item 2");
      assert.ok(third instanceof AppendStreamBrokenError);
      assert.equal(third.code, Code.DeadlineExceeded);
      await within(ap.close(), limitMs, "close()");
      await fake.waitEnded(2);
      assert.equal(fake.opened, 2);
      assert.ok(Date.now() - t0 < limitMs);
    } finally {
      client.close();
      await fake.stop();
    }
  });

  test("an append waiting for a place past its own deadline rejects unsent, taking no place", async () => {
    const fake = await StalledServer.start();
    const client = connect(fake.addr, { tls: false, timeoutMs: 0 });
    try {
      const ap = client.appender({ window: 1, timeoutMs: 1000 });
      const held = rejection(ap.append(instr("held")), "the held item");
      const t0 = Date.now();
      const waited = await rejection(ap.append(instr("waited"), { timeoutMs: 100 }), "the waiting item");
      assert.ok(!(waited instanceof AppendStreamBrokenError), "the item was never sent");
      assert.equal(waited.code, Code.DeadlineExceeded);
      assert.ok(Date.now() - t0 < 1000, "it failed at its own deadline, before the held item's");
      const heldErr = await held;
      assert.ok(heldErr instanceof AppendStreamBrokenError);
      assert.equal(heldErr.code, Code.DeadlineExceeded);
      await within(ap.close(), limitMs, "close()");
      await fake.waitEnded(1);
    } finally {
      client.close();
      await fake.stop();
    }
  });

  test("the appender's signal cancels the stream and rejects everything, CANCELED", async () => {
    const fake = await StalledServer.start();
    const client = connect(fake.addr, { tls: false, timeoutMs: 0 });
    try {
      const ac = new AbortController();
      const ap = client.appender({ window: 2, signal: ac.signal });
      const sent = [rejection(ap.append(instr("a")), "sent item 0"), rejection(ap.append(instr("b")), "sent item 1")];
      const waiting = rejection(ap.append(instr("c")), "the waiting item");
      ac.abort();
      for (const p of sent) {
        const err = await p;
        assert.ok(err instanceof AppendStreamBrokenError);
        assert.equal(err.code, Code.Canceled);
      }
      const w = await waiting;
      assert.ok(!(w instanceof AppendStreamBrokenError));
      assert.equal(w.code, Code.Canceled);
      assert.equal((await rejection(ap.append(instr("d")), "an append after the signal")).code, Code.Canceled);
      await within(ap.close(), limitMs, "close()");
      await fake.waitEnded(1);
      assert.equal(fake.opened, 1);
    } finally {
      client.close();
      await fake.stop();
    }
  });

  // The rule (appender.ts): an item's own signal gives up on that item alone, even once it is on
  // the stream: the stream goes on (the item after it meets the appender's deadline there). A
  // given-up item keeps its place until its answer; unanswered within the appender's timeoutMs of
  // the giving up, it cancels the stream as stalled, so its place comes back and close() returns.
  // Before, the signal cancelled the stream, and the item after it rejected CANCELED too.
  test("an item's own signal, once sent, gives up on it alone; the appender's timeoutMs still ends the stall", async () => {
    const fake = await StalledServer.start();
    const client = connect(fake.addr, { tls: false, timeoutMs: 0 });
    try {
      const ap = client.appender({ window: 4, timeoutMs: 300 });
      const ac = new AbortController();
      const mine = rejection(ap.append(instr("mine"), { signal: ac.signal }), "the cancelled item");
      const after = rejection(ap.append(instr("after")), "the item after it");
      await fake.waitMessages(3); // the window request and both items are on the stream
      ac.abort();
      const mineErr = await mine;
      assert.ok(mineErr instanceof AppendAbandonedError, `given up on the stream: ${String(mineErr)}`);
      assert.equal(mineErr.code, Code.Canceled);
      assert.ok(mineErr.requestId);
      assert.equal(fake.ended, 0, "the stream goes on");
      const afterErr = await after;
      assert.ok(afterErr instanceof AppendStreamBrokenError, String(afterErr));
      assert.equal(afterErr.code, Code.DeadlineExceeded, "at the appender's deadline, not cancelled with the item before it");
      await fake.waitEnded(1);
      // Alone on a new stream, a given-up item's stall ends at the appender's deadline too.
      const ac2 = new AbortController();
      const lone = rejection(ap.append(instr("lone"), { signal: ac2.signal }), "the lone item");
      await fake.waitMessages(5);
      ac2.abort();
      assert.ok((await lone) instanceof AppendAbandonedError);
      await fake.waitEnded(2);
      await within(ap.close(), limitMs, "close()");
      assert.equal(fake.opened, 2);
    } finally {
      client.close();
      await fake.stop();
    }
  });
});
