// Keepalive (connect(addr, {keepalive})): HTTP/2 pings find a connection gone silent, so a watch on
// it resumes instead of waiting for a frame that cannot come; and the defaults suit historyd's
// keepalive enforcement (--keepalive-min-time: a client pinging more often is sent GOAWAY).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { connect, defaultKeepalive, type WatchItem } from "../src/index.js";
import { within } from "./helpers/fake_server.js";
import { CuttableProxy } from "./helpers/proxy.js";
import { historydBin, startHistoryd, type Historyd } from "./helpers/server.js";

describe("keepalive", () => {
  test("the defaults respect the server's --keepalive-min-time and --keepalive-permit-without-stream", async () => {
    const { stdout, stderr } = await promisify(execFile)(historydBin(), ["serve", "--help"], { timeout: 30_000 }).catch(
      (e: { stdout: string; stderr: string }) => e,
    );
    const text = stdout + stderr;
    const min = /--keepalive-min-time\n[\s\S]*?default (\d+)(s|m)\)/.exec(text);
    assert.ok(min, "the server's --help names --keepalive-min-time with its default");
    assert.ok(defaultKeepalive.timeMs >= Number(min[1]) * (min[2] === "m" ? 60_000 : 1000));
    const permit = /--keepalive-permit-without-stream\n[\s\S]*?default (\w+)\)/.exec(text);
    assert.equal(permit?.[1], "false");
    assert.equal(defaultKeepalive.permitWithoutCalls, false, "pings on an idle connection count as abuse");
  });

  describe("a connection gone silent", () => {
    let server: Historyd;
    before(async () => {
      // The test's fast pings are allowed: a server with its defaults would send GOAWAY.
      server = await startHistoryd(["--keepalive-min-time", "100ms"]);
    });
    after(async () => {
      assert.equal(await server?.stop(), 0);
    });

    // A watch whose connection is black-holed (the proxy drops everything, no FIN, no RST) gets no
    // frame and no error without keepalive. With it, the unanswered ping closes the connection
    // within timeMs + timeoutMs, and the watch resumes on a new one and delivers the commit written
    // meanwhile.
    test("a watch resumes after its connection is black-holed", async () => {
      const proxy = await CuttableProxy.start(server.addr);
      const writer = connect(server.addr, { tls: false });
      const watcher = connect(proxy.addr, { tls: false, keepalive: { timeMs: 200, timeoutMs: 300 } });
      try {
        const branch = await writer.createBranch();
        const watch = watcher.branch(branch.id).watch({ after: 0n });
        const it = watch[Symbol.asyncIterator]();
        const first = (await within(it.next(), 5000, "the first commit")).value as WatchItem;
        assert.ok(first.case === "commit" && first.value.lastSequence === 1n);
        await proxy.waitClientPings(2, 5000); // the quiet watch is pinged, and the pings answered
        proxy.freeze();
        await writer.branch(branch.id).addInstruction("while silent");
        const next = (await within(it.next(), 5000, "the watch to notice its connection was gone")).value as WatchItem;
        assert.ok(next.case === "commit" && next.value.lastSequence === 2n);
        assert.ok(watch.resumes >= 1);
        watch.close();
      } finally {
        writer.close();
        watcher.close();
        await proxy.close();
      }
    });
  });
});
