// A generated stub's stream that the caller leaves early (`break`, `return`, a throw in the loop's
// body) ends its call: the server sees the stream reset, and Connect's deadline timer goes with it.
// The server is a fake historyd (a bare node:http2 server) that answers every stream with one
// WatchBranch start frame and then holds it open, as a watch with nothing to say does.
//
// Before, Connect's stream iterator has no return(), so leaving the loop left the call running: the
// server's stream stayed open until the client closed, and a timeoutMs left its timer holding the
// process until the deadline (a loop that broke out of a watch with timeoutMs 20 s kept node alive
// 20 s after everything was closed).

import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";

import { connect } from "../src/index.js";
import { WatchBranchResponseSchema } from "../src/gen/historyd/v1/history_service_pb.js";

/** What a test may take at most. */
const limitMs = 5000;

/** p, or a rejection after ms: a promise that never settles fails the test instead of hanging it. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A gRPC server in name only: every stream gets one start frame and is held open; it counts the
 * streams the client ended. */
class HoldingServer {
  ended = 0;
  readonly #server = http2.createServer();
  readonly #waiters: (() => void)[] = [];

  static async start(): Promise<HoldingServer> {
    const s = new HoldingServer();
    const msg = toBinary(WatchBranchResponseSchema, create(WatchBranchResponseSchema, { frame: { case: "start", value: { afterSequence: 1n, incarnation: "i" } } }));
    const framed = Buffer.alloc(5 + msg.length);
    framed.writeUInt32BE(msg.length, 1);
    framed.set(msg, 5);
    s.#server.on("stream", (stream) => {
      stream.on("error", () => {}); // the client's RST_STREAM(CANCEL)
      stream.on("close", () => {
        s.ended++;
        for (const w of s.#waiters.splice(0)) w();
      });
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
      stream.write(framed);
    });
    await new Promise<void>((resolve) => s.#server.listen(0, "127.0.0.1", resolve));
    return s;
  }

  get addr(): string {
    return `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Resolves once n streams in all have ended (within limitMs, else rejects). */
  async waitEnded(n: number): Promise<void> {
    while (this.ended < n) await within(new Promise<void>((r) => this.#waiters.push(r)), limitMs, `${n} streams ended`);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/** The timers that keep the process alive (unref'd ones are not listed). */
const refTimers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;

describe("a generated stub's stream left early", () => {
  test("breaking out of the loop ends the call on the server", async () => {
    const fake = await HoldingServer.start();
    const client = connect(fake.addr, { tls: false });
    try {
      for await (const frame of client.history.watchBranch({ branchId: "b" })) {
        assert.equal(frame.frame.case, "start");
        break;
      }
      await fake.waitEnded(1);
    } finally {
      client.close();
      await fake.stop();
    }
  });

  test("a call with a timeoutMs leaves no deadline timer behind", async () => {
    const fake = await HoldingServer.start();
    const client = connect(fake.addr, { tls: false });
    try {
      const before = refTimers();
      for await (const frame of client.history.watchBranch({ branchId: "b" }, { timeoutMs: 60_000 })) {
        assert.equal(frame.frame.case, "start");
        break;
      }
      assert.equal(refTimers(), before, "the call's deadline timer was cleared when the loop was left");
      await fake.waitEnded(1);
    } finally {
      client.close();
      await fake.stop();
    }
  });
});
