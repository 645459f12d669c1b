// Starts the real historyd binary for a test and stops it afterwards: `--listen 127.0.0.1:0` picks a
// free port, and the address comes from the JSON "serving" log line on stderr (README
// "Configuration"). The binary is $HISTORYD_BIN, else bin/historyd of the repository (`make
// node-test` builds it first).

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import { repoRoot } from './historyd.mjs';

/** How long the binary may take to log its serving line. */
const startTimeoutMs = 30_000;
/** How long it may take to exit after SIGTERM (its grace period is 10s by default; the tests leave
 * no RPC open, so it exits at once). */
const stopTimeoutMs = 15_000;

/** The historyd binary to run. */
export function historydBin() {
  const bin = process.env.HISTORYD_BIN || path.join(repoRoot, 'bin', 'historyd');
  if (!existsSync(bin)) {
    throw new Error(`historyd binary not found at ${bin}: run \`make node-test\` (it builds it) or set HISTORYD_BIN`);
  }
  return bin;
}

/** Starts historyd with extra flags and resolves to {addr, pid, stop, logs} once it serves. stop()
 * sends SIGTERM and resolves to the exit code; a process still running after stopTimeoutMs is
 * killed with SIGKILL. The process is also killed if the test process exits first. */
export function startHistoryd(extraArgs = []) {
  const bin = historydBin();
  const child = spawn(bin, ['--listen', '127.0.0.1:0', '--log-format', 'json', ...extraArgs], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const logs = [];
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);

  const stop = async () => {
    process.removeListener('exit', killOnExit);
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    child.kill('SIGTERM');
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve('killed after timeout');
      }, stopTimeoutMs);
    });
    const result = await Promise.race([exited, timeout]);
    clearTimeout(timer);
    return result;
  };

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`historyd did not log "serving" within ${startTimeoutMs} ms:\n${logs.join('\n')}`));
    }, startTimeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`historyd exited (${code}) before serving:\n${logs.join('\n')}`));
    });
    readline.createInterface({ input: child.stderr }).on('line', (line) => {
      logs.push(line);
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.msg === 'serving' && entry.address) {
        clearTimeout(timer);
        resolve({ addr: entry.address, pid: child.pid, stop, logs });
      }
    });
  });
}
