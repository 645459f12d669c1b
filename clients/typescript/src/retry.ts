// Retries of unary calls, as the Go client's (client/retry.go): a read-only method is always safe to
// retry; a method whose request has a request_id is retried with the same id, which the client fills
// in when the caller left it empty, so the server applies the call once (AIP-155; DESIGN.md
// "Idempotency"). Every other method (Register, Unregister, Collect, CollectAll, PopMessage) is
// never retried: a retry after a lost response would pop a second message.

import { randomUUID } from "node:crypto";

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

import { isConnectionLoss } from "./errors.js";
import { checkRange, maxTimerMs, pauseRange } from "./timer.js";

/** Bounds of the retries of unary calls. Checked when the client or watch that takes it is made:
 * a field out of its range throws a RangeError naming it (timer.ts). */
export interface RetryPolicy {
  /** Attempts, the first included; 1 or less turns retries off; not NaN. */
  maxAttempts: number;
  /** The pause before the second attempt, in ms (0 to 2^31-1, setTimeout's longest); each later
   * one is `multiplier` times longer. */
  initialBackoffMs: number;
  /** The longest pause, in ms (0 to 2^31-1; 0: no cap but 2^31-1 ms itself). */
  maxBackoffMs: number;
  /** Growth of the pause between attempts, a finite number; below 1 means 1. */
  multiplier: number;
  /** The fraction (0 to 1) by which each pause varies at random. */
  jitter: number;
}

/** The Go client's DefaultRetryPolicy: 5 attempts, 50 ms doubling to at most 2 s, ±20% jitter. */
export const defaultRetryPolicy: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 5,
  initialBackoffMs: 50,
  maxBackoffMs: 2000,
  multiplier: 2,
  jitter: 0.2,
});

/** The unary methods that change nothing (client/retry.go readOnly), as "service/method". */
export const readOnlyMethods: ReadonlySet<string> = new Set([
  "historyd.v1.HistoryService/GetBranch",
  "historyd.v1.HistoryService/ListBranches",
  "historyd.v1.HistoryService/GetMessage",
  "historyd.v1.HistoryService/ListMessages",
  "historyd.v1.HistoryService/GetLastMessage",
  "historyd.v1.HistoryService/ToChatMessages",
  "historyd.v1.HistoryService/ExportBranch",
  "historyd.v1.ExchangeService/ListOwners",
  "historyd.v1.ExchangeService/Receive",
  "historyd.v1.ExchangeService/ListDeadLetters",
]);

/** Throws a RangeError naming the field (`option` + "." + its name) of a policy out of its range
 * (RetryPolicy), and returns the policy. */
export function checkRetryPolicy(p: RetryPolicy, option: string): RetryPolicy {
  checkRange(`${option}.maxAttempts`, p.maxAttempts, -Infinity, Infinity, "a number");
  checkRange(`${option}.initialBackoffMs`, p.initialBackoffMs, 0, maxTimerMs, pauseRange);
  checkRange(`${option}.maxBackoffMs`, p.maxBackoffMs, 0, maxTimerMs, pauseRange);
  checkRange(`${option}.multiplier`, p.multiplier, -Number.MAX_VALUE, Number.MAX_VALUE, "a finite number");
  checkRange(`${option}.jitter`, p.jitter, 0, 1, "a number from 0 to 1");
  return p;
}

/** The pause before attempt `attempt + 1`, jittered; at most setTimeout's longest delay, however
 * far the multiplier grew it (a longer one would fire after 1 ms). */
export function backoffMs(p: RetryPolicy, attempt: number): number {
  const base = Math.min(p.initialBackoffMs * Math.max(p.multiplier, 1) ** (attempt - 1), p.maxBackoffMs || Infinity, maxTimerMs);
  const j = Math.min(Math.max(p.jitter, 0), 1);
  return Math.min(base * (1 - j + 2 * j * Math.random()), maxTimerMs);
}

/** Resolves after ms, or rejects with the reason of the first of the signals to abort. */
export function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void> {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  return new Promise((resolve, reject) => {
    const aborted = live.find((s) => s.aborted);
    if (aborted !== undefined) return reject(aborted.reason);
    const off = () => {
      for (const { s, onAbort } of listeners) s.removeEventListener("abort", onAbort);
    };
    const listeners = live.map((s) => ({
      s,
      onAbort: () => {
        clearTimeout(timer);
        off();
        reject(s.reason);
      },
    }));
    const timer = setTimeout(() => {
      off();
      resolve();
    }, ms);
    for (const { s, onAbort } of listeners) s.addEventListener("abort", onAbort, { once: true });
  });
}

/** The interceptor that fills request ids and retries unary calls on UNAVAILABLE (and on a dropped
 * connection, which connect-node reports as CANCELED). The interceptors
 * after it in the chain run once per attempt. `closing` is the client's close signal: once it is
 * aborted no attempt is made (it is checked before each one), and a pause between attempts ends at
 * once, the call rejecting with its reason (a retry after close() would open a new connection, were
 * the connection not refused: connection.ts). */
export function retryInterceptor(policy: RetryPolicy, closing?: AbortSignal): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    const hasRequestId = req.method.input.fields.some((f) => f.name === "request_id");
    if (hasRequestId) {
      const msg = req.message as unknown as { requestId?: string };
      if (!msg.requestId) msg.requestId = randomUUID();
    }
    const retryable = hasRequestId || readOnlyMethods.has(`${req.service.typeName}/${req.method.name}`);
    if (!retryable || policy.maxAttempts <= 1) return next(req);
    for (let attempt = 1; ; attempt++) {
      // Before each attempt, the first and the ones after a pause: the pause's own listener is not
      // all that stands between close() and another attempt.
      if (closing?.aborted) throw closing.reason;
      try {
        return await next(req);
      } catch (err) {
        const ce = ConnectError.from(err);
        const unavailable = ce.code === Code.Unavailable || isConnectionLoss(ce, req.signal);
        if (attempt >= policy.maxAttempts || !unavailable || req.signal.aborted) throw err;
        if (closing?.aborted) throw closing.reason;
        await sleep(backoffMs(policy, attempt), req.signal, closing);
      }
    }
  };
}
