// A resuming branch watch (DESIGN.md "Sequences, events and watch"; the WatchBranch guarantees in
// history_service.proto): the client keeps the cursor (the last commit's last_sequence, or a
// heartbeat's head_sequence) and the incarnation, and after a disconnect opens a new WatchBranch
// after that cursor, so the caller sees every event once and in order across the gap.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import type { HistorydClient } from "./client.js";
import { BranchDeletedError, clientClosedError, ErrorReason, HistorydError, toHistorydError } from "./errors.js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { EventKind, type BranchCommit, type WatchHeartbeat } from "./gen/historyd/v1/history_service_pb.js";
import { withDefaults } from "./options.js";
import { backoffMs, checkRetryPolicy, defaultRetryPolicy, type RetryPolicy } from "./retry.js";
import { checkRange, setLongTimeout } from "./timer.js";

/** Options of Branch.watch. */
export interface WatchOptions {
  /** The cursor: the last sequence the caller has; events after it follow. Absent: from now (no
   * replay); 0n: everything the server still retains. */
  after?: bigint;
  /** The branch's incarnation the cursor belongs to (Branch.incarnation); sent on every resume. A
   * watch learns it from its first start frame when not given. */
  incarnation?: string;
  /** Only these event kinds (BRANCH_DELETED always comes). */
  kinds?: EventKind[];
  /** Ask for each message's `rendered` field. */
  includeRendered?: boolean;
  /** Let the server send the commits a lagging watch is behind on several to a frame (issue 21);
   * they are yielded one at a time all the same. */
  batchCommits?: boolean;
  /** Yield heartbeats too (each one moves the cursor). */
  heartbeats?: boolean;
  /** Resumes in a row, without a commit or heartbeat in between, before the watch gives up and
   * throws the last error (default 8; 0 to Infinity); pauses between them follow `backoff`. */
  maxResumes?: number;
  /** Pauses between resumes (defaultRetryPolicy's backoff by default; a field left out or given
   * as undefined keeps its default). A field out of its range (RetryPolicy), or a maxResumes out
   * of its own, throws a RangeError naming it when the watch is made. */
  backoff?: Partial<RetryPolicy>;
  /** Ends the watch. */
  signal?: AbortSignal;
}

/** One item of a watch: a commit, or (with heartbeats) a heartbeat. */
export type WatchItem = { case: "commit"; value: BranchCommit } | { case: "heartbeat"; value: WatchHeartbeat };

/** A branch watch: `for await (const item of watch)`. `cursor`, `incarnation` and `resumes` say how
 * far it got and how often it reconnected. */
export class BranchWatch implements AsyncIterable<WatchItem> {
  /** The last sequence delivered (undefined until the first start frame of a watch from now). */
  cursor: bigint | undefined;
  /** The branch's incarnation (from the options or the first start frame). */
  incarnation: string | undefined;
  /** How many times the watch reopened its stream after a disconnect. */
  resumes = 0;
  /** Resolves when the first stream has begun (its start frame came: from then on the watch sees
   * every commit, so a test or a caller can write knowing the watch will see it), and rejects when
   * the watch ends before that. It settles only once the watch is iterated. */
  readonly ready: Promise<void>;
  readonly #abort = new AbortController();
  readonly #policy: RetryPolicy;
  #started = false;
  #ready!: { resolve: () => void; reject: (err: unknown) => void };

  constructor(
    readonly client: HistorydClient,
    readonly branchId: string,
    readonly options: WatchOptions = {},
  ) {
    this.#policy = checkRetryPolicy(withDefaults(defaultRetryPolicy, options.backoff), "backoff");
    checkRange("maxResumes", options.maxResumes, 0, Infinity, "a number from 0 to Infinity");
    this.cursor = options.after;
    this.incarnation = options.incarnation;
    this.ready = new Promise<void>((resolve, reject) => (this.#ready = { resolve, reject }));
    this.ready.catch(() => {}); // the iteration reports the error; ready must not be unhandled
  }

  /** Ends the watch: the loop over it finishes without an error. */
  close(): void {
    this.#abort.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<WatchItem> {
    if (this.#started) throw new Error("historyd: a BranchWatch is iterated once; call branch.watch() again");
    this.#started = true;
    return this.#run();
  }

  async *#run(): AsyncGenerator<WatchItem> {
    const signal = this.#abort.signal;
    // The caller's signal ends the watch. Its listener is added here and removed when the watch
    // ends: added in the constructor and never removed, it stayed on the caller's signal for good,
    // one a watch, keeping each watch and its client reachable.
    const caller = this.options.signal;
    const onAbort = () => this.#abort.abort(caller?.reason);
    if (caller?.aborted) onAbort();
    else caller?.addEventListener("abort", onAbort, { once: true });
    const policy = this.#policy;
    const maxResumes = this.options.maxResumes ?? 8;
    let failures = 0;
    let deletedAt: bigint | undefined; // the sequence of the BRANCH_DELETED commit yielded
    try {
      for (;;) {
        // The client was closed (during the pause below, say): its connection is gone, and a
        // call now would open another.
        if (this.client.closed) throw clientClosedError();
        try {
          const stream = this.client.history.watchBranch(
            {
              branchId: this.branchId,
              afterSequence: this.cursor,
              incarnation: this.incarnation,
              kinds: this.options.kinds ?? [],
              includeRendered: this.options.includeRendered ?? false,
              batchCommits: this.options.batchCommits ?? false,
            },
            { signal },
          );
          for await (const frame of stream) {
            switch (frame.frame.case) {
              case "start":
                this.incarnation = frame.frame.value.incarnation;
                this.cursor = frame.frame.value.afterSequence;
                this.#ready.resolve();
                break;
              case "commit":
                failures = 0; // progress: the next disconnect starts the backoff over
                this.cursor = frame.frame.value.lastSequence;
                if (isDeletion(frame.frame.value)) deletedAt = this.cursor;
                yield { case: "commit", value: frame.frame.value };
                break;
              case "commits": // batchCommits (issue 21): each in order, as a commit frame
                for (const c of frame.frame.value.commits) {
                  failures = 0;
                  this.cursor = c.lastSequence;
                  if (isDeletion(c)) deletedAt = this.cursor;
                  yield { case: "commit", value: c };
                }
                break;
              case "heartbeat":
                failures = 0;
                this.cursor = frame.frame.value.headSequence;
                if (this.options.heartbeats) yield { case: "heartbeat", value: frame.frame.value };
                break;
            }
          }
          // A stream never ends with OK (WatchBranch guarantees); treat it as a disconnect.
          throw new ConnectError("historyd: the watch stream ended without a status", Code.Unavailable);
        } catch (err) {
          if (signal.aborted) return;
          const e = toHistorydError(err);
          // Nothing can follow the deletion: the watch ends there, however its stream ended.
          if (deletedAt !== undefined) throw deletedError(this.branchId, deletedAt, e);
          // The client was closed: its connection's end is no reason to open another.
          if (this.client.closed) throw clientClosedError();
          if (!resumable(e) || ++failures > maxResumes) throw e;
          // The pause ends early when the watch or the client is closed; the loop's checks end
          // the watch then.
          await pause(backoffMs(policy, failures), [signal, this.client.closeSignal]);
          if (signal.aborted) return;
          if (this.client.closed) throw clientClosedError();
          this.resumes++;
        }
      }
    } catch (err) {
      this.#ready.reject(err);
      if (signal.aborted) return;
      throw err;
    } finally {
      caller?.removeEventListener("abort", onAbort);
      this.#ready.reject(new Error("historyd: the watch ended"));
      this.#abort.abort();
    }
  }
}

/** Waits ms, or until one of the signals aborts (then it resolves all the same). */
function pause(ms: number, signals: (AbortSignal | undefined)[]): Promise<void> {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  if (live.some((s) => s.aborted)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      timer.clear();
      for (const s of live) s.removeEventListener("abort", done);
      resolve();
    };
    const timer = setLongTimeout(done, ms);
    for (const s of live) s.addEventListener("abort", done, { once: true });
  });
}

/** Whether the commit holds the branch's BRANCH_DELETED event. */
function isDeletion(c: BranchCommit): boolean {
  return c.events.some((ev) => ev.kind === EventKind.BRANCH_DELETED);
}

/** How a watch that yielded the commit of the branch's deletion ends, whatever ended its stream:
 * BranchDeletedError, as the server's own end says it (branchId, lastSequence). When the connection
 * dropped between that commit and the stream's NOT_FOUND status, the stream ended UNAVAILABLE, and
 * a resume could only find the branch gone (BRANCH_NOT_FOUND, or HISTORY_COMPACTED for a branch made
 * again under its id), which the docs do not promise (review of the clients, fault 5; the Go
 * client's Watch ends there too: client/watch.go, deleted). */
function deletedError(branchId: string, lastSequence: bigint, e: HistorydError): HistorydError {
  if (e instanceof BranchDeletedError) return e;
  const info = create(ErrorInfoSchema, {
    reason: "ERROR_REASON_BRANCH_DELETED",
    domain: "historyd",
    metadata: { branchId, lastSequence: lastSequence.toString() },
  });
  const msg = `the branch was deleted: its BRANCH_DELETED commit (${lastSequence}) was received, then the stream ended (${e.message})`;
  return new BranchDeletedError(new ConnectError(msg, Code.NotFound, undefined, undefined, e), info);
}

/** Whether a watch's end is worth a resume from the cursor: the connection broke or the server is
 * going away (UNAVAILABLE), the stream fell behind (SUBSCRIBER_TOO_SLOW), or a transport failure
 * with no ErrorInfo (a dropped connection is UNAVAILABLE: toHistorydError). HISTORY_COMPACTED, BRANCH_DELETED,
 * FRAME_TOO_LARGE and every other reason are the caller's. */
function resumable(e: HistorydError): boolean {
  if (e.code === Code.Unavailable) return true;
  if (e.is(ErrorReason.SUBSCRIBER_TOO_SLOW)) return true;
  return e.reasonName === "" && [Code.Internal, Code.Unknown, Code.Aborted].includes(e.code);
}
