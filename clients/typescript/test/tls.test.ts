// TLS and mutual TLS options against the real binary started with --tls-cert, --tls-key and
// --tls-client-ca (README "Security": Transport), with certificates the test makes with openssl:
// the "the same token and TLS options as the Go client".

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { connect, HistorydError } from "../src/index.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

function haveOpenssl(): boolean {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Makes a CA, a server certificate for 127.0.0.1 and a client certificate in dir. */
function makeCertificates(dir: string): void {
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  const key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run("req", "-x509", ...key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=historyd-ts-test-ca");
  writeFileSync(path.join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  writeFileSync(path.join(dir, "client.ext"), "extendedKeyUsage=clientAuth\n");
  for (const who of ["server", "client"]) {
    run("req", ...key, "-keyout", `${who}.key`, "-out", `${who}.csr`, "-subj", `/CN=historyd-ts-test-${who}`);
    run("x509", "-req", "-in", `${who}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${who}.pem`, "-days", "1", "-extfile", `${who}.ext`);
  }
}

describe("tls", { skip: haveOpenssl() ? false : "openssl is not on PATH: no certificates to test TLS with" }, () => {
  let dir: string;
  let server: Historyd;
  const file = (name: string) => readFileSync(path.join(dir, name));
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "historyd-ts-tls-"));
    makeCertificates(dir);
    server = await startHistoryd([
      "--tls-cert",
      path.join(dir, "server.pem"),
      "--tls-key",
      path.join(dir, "server.key"),
      "--tls-client-ca",
      path.join(dir, "ca.pem"),
    ]);
  });
  after(async () => {
    assert.equal(await server?.stop(), 0);
    rmSync(dir, { recursive: true, force: true });
  });

  test("mutual TLS with the tls option: CA, client certificate and key", async () => {
    const client = connect(server.addr, { tls: { ca: file("ca.pem"), cert: file("client.pem"), key: file("client.key") } });
    try {
      const branch = await client.createBranch({ system: "" });
      assert.equal((await branch.describe()).id, branch.id);
    } finally {
      client.close();
    }
  });

  test("without a client certificate, with an unknown CA, or in plaintext the call fails", async () => {
    for (const [what, tls] of [
      ["no client certificate", { ca: file("ca.pem") }],
      ["the system roots only", true],
      ["plaintext", false],
    ] as const) {
      const client = connect(server.addr, { tls, retry: { maxAttempts: 1 }, timeoutMs: 5000 });
      try {
        await assert.rejects(client.createBranch(), (err: unknown) => {
          assert.ok(err instanceof HistorydError, `${what}: ${String(err)}`);
          return true;
        });
      } finally {
        client.close();
      }
    }
  });
});
