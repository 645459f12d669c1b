// Starts the real historyd binary for a test and stops it afterwards: `--listen 127.0.0.1:0` picks a
// free port, and the address comes from the JSON "serving" log line on stderr (README
// "Configuration"). The binary is $HISTORYD_BIN, else bin/historyd of the repository (`make ts-test`
// builds it first).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { after, before } from "node:test";

import { connect, type HistorydClient } from "../../src/index.js";
import { repoRoot } from "./repo.js";

/** How long the binary may take to log its serving line. */
const startTimeoutMs = 30_000;
/** How long it may take to exit after SIGTERM (the tests leave no RPC open, so it exits at once). */
const stopTimeoutMs = 15_000;

/** A running historyd. */
export interface Historyd {
  /** host:port it serves on. */
  addr: string;
  pid: number;
  /** SIGTERM, then resolves to the exit code (or signal, or "killed after timeout"). */
  stop(): Promise<number | string>;
  /** Its stderr lines so far. */
  logs: string[];
}

/** The historyd binary to run. */
export function historydBin(): string {
  const bin = process.env.HISTORYD_BIN || path.join(repoRoot, "bin", "historyd");
  if (!existsSync(bin)) {
    throw new Error(`historyd binary not found at ${bin}: run \`make ts-test\` (it builds it) or set HISTORYD_BIN`);
  }
  return bin;
}

/** Starts historyd with extra flags and resolves once it serves. The process is killed if the test
 * process exits first. */
export function startHistoryd(extraArgs: string[] = []): Promise<Historyd> {
  const bin = historydBin();
  // --store memory: parallel servers must never share the default ./data (issue 14); extraArgs
  // come after and win.
  // Its flags alone configure it: a HISTORYD_* variable of the shell (one of another engine is
  // refused at start) must not reach it.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("HISTORYD_")));
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--log-format", "json", "--store", "memory", ...extraArgs], {
    stdio: ["ignore", "ignore", "pipe"],
    env,
  });
  const logs: string[] = [];
  const exited = new Promise<number | string>((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal ?? "")));
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

  const stop = async (): Promise<number | string> => {
    process.removeListener("exit", killOnExit);
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    child.kill("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((resolve) => {
      timer = setTimeout(() => {
        child.kill("SIGKILL");
        resolve("killed after timeout");
      }, stopTimeoutMs);
    });
    const result = await Promise.race([exited, timeout]);
    clearTimeout(timer);
    return result;
  };

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`historyd did not log "serving" within ${startTimeoutMs} ms:\n${logs.join("\n")}`));
    }, startTimeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`historyd exited (${code}) before serving:\n${logs.join("\n")}`));
    });
    readline.createInterface({ input: child.stderr! }).on("line", (line) => {
      logs.push(line);
      let entry: { msg?: string; address?: string };
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.msg === "serving" && entry.address) {
        clearTimeout(timer);
        resolve({ addr: entry.address, pid: child.pid!, stop, logs });
      }
    });
  });
}

/** A historyd with the suite's defaults and a client of it, for a whole describe: started in the
 * suite's before hook, handed to set, and stopped in its after hook (the client closed, the server
 * stopped, which must exit 0). */
export function serveSuite(set: (server: Historyd, client: HistorydClient) => void): void {
  let server: Historyd | undefined;
  let client: HistorydClient | undefined;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr, { tls: false });
    set(server, client);
  });
  after(async () => {
    client?.close();
    assert.equal(await server?.stop(), 0);
  });
}
