// The README's examples are executed (issue 20: "the TypeScript README example is executed by
// tests"): README.md's ts blocks must be examples/quickstart.ts and examples/appender.ts byte for byte,
// and the compiled examples run against the real binary and print what the README says they print.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { packageDir } from "./helpers/repo.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

describe("README", () => {
  let server: Historyd;
  before(async () => {
    server = await startHistoryd();
  });
  after(async () => {
    assert.equal(await server?.stop(), 0);
  });

  test("the README's examples are examples/quickstart.ts and examples/appender.ts", () => {
    const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
    assert.equal(blocks.length, 2, "README.md has two ts blocks");
    assert.equal(blocks[0], readFileSync(path.join(packageDir, "examples", "quickstart.ts"), "utf8"));
    assert.equal(blocks[1], readFileSync(path.join(packageDir, "examples", "appender.ts"), "utf8"));
  });

  test("the example runs and prints the conversation, the watch, the error and the exchange", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(packageDir, "build", "examples", "quickstart.js")], {
      env: { ...process.env, HISTORYD_ADDR: server.addr },
      timeout: 30_000,
    });
    const lines = stdout.trimEnd().split("\n");
    assert.deepEqual(lines, [
      "action: actionRequest",
      "action: actionResponse",
      'system: "You are a careful calculator."',
      'user: "Instruction: What is 30 + 12?\\nContext:\\n- a: 30\\n  b: 12"',
      'assistant: "I will call add."',
      'action: "Function: add\\nArguments:\\n  a: 30\\n  b: 12"',
      'action: "Function: add\\nArguments:\\n  a: 30\\n  b: 12\\nOutput:\\n  sum: 42"',
      "exported messages: 5",
      "event 1 BRANCH_CREATED",
      "event 2 MESSAGE_ADDED",
      "event 3 MESSAGE_ADDED",
      "event 4 MESSAGE_ADDED",
      "event 5 MESSAGE_ADDED",
      "event 6 MESSAGE_REPLACED",
      "not found: true",
      "delivered: 1",
      'bob got: {"text":"hi Bob"}',
    ]);
  });

  test("the appender example runs: 100 items written, none to append again", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(packageDir, "build", "examples", "appender.js")], {
      env: { ...process.env, HISTORYD_ADDR: server.addr },
      timeout: 30_000,
    });
    assert.deepEqual(stdout.trimEnd().split("\n"), ["written: 100 to append again: 0", "head: 101n"]);
  });
});
