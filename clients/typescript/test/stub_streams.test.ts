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
import { describe, test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";

import { connect } from "../src/index.js";
import { WatchBranchResponseSchema } from "../src/gen/historyd/v1/history_service_pb.js";
import { FakeServer } from "./helpers/fake_server.js";

/** A gRPC server in name only: every stream gets one start frame and is held open; it counts the
 * streams the client ended. */
class HoldingServer extends FakeServer {
  readonly #framed: Buffer;

  private constructor() {
    super();
    const msg = toBinary(WatchBranchResponseSchema, create(WatchBranchResponseSchema, { frame: { case: "start", value: { afterSequence: 1n, incarnation: "i" } } }));
    this.#framed = Buffer.alloc(5 + msg.length);
    this.#framed.writeUInt32BE(msg.length, 1);
    this.#framed.set(msg, 5);
  }

  static start(): Promise<HoldingServer> {
    return new HoldingServer().listen();
  }

  protected handle(stream: http2.ServerHttp2Stream): void {
    stream.respond({ ":status": 200, "content-type": "application/grpc" });
    stream.write(this.#framed);
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
