// The pipelined append stream (issue 21): an Appender sends AddMessage requests as the items of one
// HistoryService.AppendMessages stream without waiting for each answer, so a client that writes
// many messages is not bound by one round trip per message. Answers come back in the order
// appended, and items on one branch are applied in that order; a failed item fails alone, its
// promise rejecting with the HistorydError a unary AddMessage would have. When the stream breaks,
// the items in flight reject with an AppendStreamBrokenError (with their request id, filled in when
// empty, so they can be appended again safely), and the next append opens a new stream.
//
// An item that cannot be encoded (an expectedHeadSequence below 0, at or above 2^64, or not an
// integer) fails alone too: append() encodes it first, and rejects at once with a HistorydError,
// INVALID_ARGUMENT, without sending it or taking a place in the window. Connect encodes the
// requests of a stream inside its request pump, where one such item aborted the whole stream and
// every item in flight rejected with AppendStreamBrokenError (review of the clients, fault 2; the
// Go client's client/append_codec.go encodes each item in Append for the same reason). The check
// costs one encoding more per item: Connect encodes the item again when it sends it.
//
// Each item has bounds: a deadline and AbortSignals, its own and the appender's. The deadline is,
// by default, the appender's timeoutMs (itself by default the client's timeoutMs), and it bounds
// the wait for the item's answer: it starts when the item is sent on the stream (when Connect's
// request pump takes it to write, so not while the caller's own synchronous batch of appends keeps
// the event loop). The wait for a place in the window is not counted against it, so a batch
// appended at once, far larger than the window, is written however long its tail waits its turn;
// before, the deadline counted from the call to append(), and such a batch ran out of time in the
// queue (review of the clients 2, fault 1). An item given a deadline of its own (append(req,
// {timeoutMs})) is bounded from the call to append() instead, its wait for a place included; the
// signals, too, bound the whole.
//
// A bound that fires while the item waits for a place rejects it with a HistorydError,
// DEADLINE_EXCEEDED or CANCELED, unsent; an item whose own deadline passed by the time it gets a
// place is not sent either, even when its timer has not run yet. Once the item is on its stream,
// unanswered:
//
// - The item's own bounds, its signal and its own deadline (append(req, {signal, timeoutMs})),
//   give up on that item alone, as the Python client's appenders do. Not
//   yet taken by the transport, the item leaves the stream unsent and rejects as above, its place
//   coming back at once. Taken, it rejects with AppendAbandonedError of that code (CANCELED for a
//   signal; DEADLINE_EXCEEDED for its deadline or AbortSignal.timeout()'s), which has its request
//   id; the stream and the other items go on, and its answer is dropped when it comes. The server
//   may have applied the item, or may still: append it again with its request id to have it
//   applied exactly once. It keeps its place in the window until that answer (the server holds it
//   in its own window until then); if none comes within the appender's timeoutMs of the giving
//   up, the server is taken for stalled and the stream is cancelled, as below. Before, these
//   bounds cancelled the stream, and every other item in flight rejected with
//   AppendStreamBrokenError.
// - The appender's bounds, its timeoutMs (the deadline of an item without one of its own, from its
//   sending) and its signal, cancel the stream, as a gRPC deadline cancels a call: the item
//   cannot be taken back, so it and the items after it (answers come in order: they are
//   unanswered too) reject with AppendStreamBrokenError of that code, their places come back, and
//   the next append opens a new stream.
//
// So a server that accepts the stream and never answers holds no promise and no place past the
// bounds (but with the appender's timeoutMs 0, a given-up item holds its place until its answer
// comes), where the Go client's Appender has its context. The appender's own signal also ends it:
// later appends reject at once.

import { randomUUID } from "node:crypto";

import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import type { HistorydClient } from "./client.js";
import { clientClosedError, HistorydError, toHistorydError } from "./errors.js";
import { checkDeadline, setLongTimeout, type LongTimer } from "./timer.js";
import type { Message } from "./gen/historyd/v1/envelope_pb.js";
import {
  AddMessageRequestSchema,
  type AddMessageRequest,
  type AppendMessagesRequestSchema,
  type ItemStatus,
} from "./gen/historyd/v1/history_service_pb.js";

/** The default window: 64 items in flight, where the server's group commit has most of its gain. */
export const defaultAppendWindow = 64;

/** Options of an Appender (client.appender()). */
export interface AppenderOptions {
  /** Items in flight at most (defaultAppendWindow); the server lowers it to its own maximum. */
  window?: number;
  /** How long each item may wait for its answer, in ms, from when it is sent on the stream (its
   * wait for a place in the window is not counted): by default the client's timeoutMs (30 s); 0:
   * none; any length up to Infinity (NaN or a negative value throws a RangeError). An item given
   * its own deadline (AppendOptions.timeoutMs) has that instead. It also
   * bounds how long an item given up on the stream holds its place (AppendOptions). */
  timeoutMs?: number;
  /** Ends the appender: the stream is cancelled, the items on it reject with
   * AppendStreamBrokenError, those waiting for a place and every later append reject at once
   * (CANCELED; DEADLINE_EXCEEDED for AbortSignal.timeout()'s). */
  signal?: AbortSignal;
}

/** Options of one append(). */
export interface AppendOptions {
  /** The item's own deadline in ms, from the call to append() to its answer, its wait for a place
   * in the window included; it replaces the appender's timeoutMs for this item (0: none; NaN or a
   * negative value rejects the append with a RangeError, unsent). An item
   * whose deadline passed before it is sent rejects DEADLINE_EXCEEDED, unsent; one whose deadline
   * passes on the stream is given up alone, as by its signal: it rejects with AppendAbandonedError,
   * DEADLINE_EXCEEDED, and the stream and the other items go on. */
  timeoutMs?: number;
  /** Cancels the item: unsent, it rejects CANCELED (DEADLINE_EXCEEDED for AbortSignal.timeout()'s).
   * Sent and unanswered, it is given up alone: it rejects with AppendAbandonedError of that code,
   * the stream and the other items go on, and its answer is dropped when it comes; the server may
   * have applied it all the same (append it again with the error's requestId). */
  signal?: AbortSignal;
}

type AddMessageInit = MessageInitShape<typeof AddMessageRequestSchema>;
type RequestInit = MessageInitShape<typeof AppendMessagesRequestSchema>;

/** The error of an item whose stream ended before its answer came: it may or may not have been
 * applied; append it again with `requestId` to have it applied exactly once. */
export class AppendStreamBrokenError extends HistorydError {
  /** The item's request id. */
  readonly requestId: string;
  constructor(requestId: string, cause: HistorydError) {
    super(new ConnectError(`the append stream ended before item ${requestId} was answered (append it again): ${cause.rawMessage}`, cause.code, cause.metadata, undefined, cause), undefined);
    this.requestId = requestId;
  }
}

/** The error of an item given up on while it was on the stream, unanswered, by one of its own
 * bounds (AppendOptions): its signal (CANCELED; DEADLINE_EXCEEDED for AbortSignal.timeout()'s) or
 * its own deadline (DEADLINE_EXCEEDED). The stream and the other items went on, and the item's
 * answer is dropped when it comes; but the server may have applied it, or apply it still: append it
 * again with `requestId` to have it applied exactly once. */
export class AppendAbandonedError extends HistorydError {
  /** The item's request id. */
  readonly requestId: string;
  constructor(requestId: string, cause: HistorydError) {
    super(new ConnectError(`the append of item ${requestId} was given up while it was on the stream, unanswered; it may be applied all the same (append it again): ${cause.rawMessage}`, cause.code, cause.metadata, undefined, cause), undefined);
    this.requestId = requestId;
  }
}

interface Waiter {
  requestId: string;
  resolve: (m: Message) => void;
  reject: (e: Error) => void;
  stall?: LongTimer; // given up on the stream: cancels the stream when its answer is this late
}

/** The HistorydError of a bound that fired: DEADLINE_EXCEEDED for a deadline (an
 * AbortSignal.timeout() too), CANCELED for any other abort, the signal's reason as its cause. */
function boundError(reason: unknown, what: string): HistorydError {
  if (reason instanceof HistorydError) return reason;
  const timeout = reason instanceof Error && reason.name === "TimeoutError";
  const why = reason instanceof Error ? `: ${reason.message}` : reason === undefined ? "" : `: ${String(reason)}`;
  const code = timeout ? Code.DeadlineExceeded : Code.Canceled;
  return new HistorydError(new ConnectError(`${what} (${timeout ? "deadline exceeded" : "cancelled"}${why})`, code, undefined, undefined, reason), undefined);
}

/** One item's bounds, its deadline and the signals, as one AbortSignal whose reason is the
 * HistorydError to reject with. The deadline is armed apart (arm): from the call to append(), or
 * from the sending. `alone` says whether the bound that fired is the item's own (its signal, its
 * own deadline), which gives up on the item alone, or the appender's (its signal, its timeoutMs),
 * which cancels the stream. dispose() drops the timer and the listeners. */
class ItemBound {
  readonly #abort = new AbortController();
  readonly #requestId: string;
  #timer: LongTimer | undefined;
  #due: number | undefined; // the deadline, in performance.now() ms
  #why = "";
  #dueAlone = false; // the deadline is the item's own
  #alone = false; // the bound that fired is the item's own
  #disposed = false;
  readonly #off: (() => void)[] = [];

  constructor(requestId: string, own: AbortSignal | undefined, appender: AbortSignal | undefined) {
    this.#requestId = requestId;
    for (const [s, alone] of [
      [own, true],
      [appender, false],
    ] as const) {
      if (s === undefined) continue;
      const onAbort = () => this.#fire(boundError(s.reason, `historyd: item ${requestId}`), alone);
      if (s.aborted) onAbort();
      else {
        s.addEventListener("abort", onAbort, { once: true });
        this.#off.push(() => s.removeEventListener("abort", onAbort));
      }
    }
  }

  /** Arms the deadline, ms from now (none when ms is 0 or less, or when one is armed already; a
   * deadline past setTimeout's 2^31-1 ms is re-armed, and Infinity never fires); `why` is what its
   * error says passed, `alone` whether it is the item's own deadline. */
  arm(ms: number, why: string, alone: boolean): void {
    if (!(ms > 0) || this.#due !== undefined || this.#abort.signal.aborted || this.#disposed) return;
    this.#due = performance.now() + ms;
    this.#why = why;
    this.#dueAlone = alone;
    this.#timer = setLongTimeout(() => this.#expire(), ms);
  }

  /** Fires the deadline when it passed by the clock: its timer may not have run yet (the event
   * loop busy, as under a big batch). */
  check(): void {
    if (this.#due !== undefined && performance.now() >= this.#due) this.#expire();
  }

  #expire(): void {
    this.#fire(boundError(new DOMException(this.#why, "TimeoutError"), `historyd: item ${this.#requestId}`), this.#dueAlone);
  }

  #fire(err: HistorydError, alone: boolean): void {
    if (this.#abort.signal.aborted) return;
    this.#alone = alone;
    this.#abort.abort(err);
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** Whether the bound that fired is the item's own: its signal or its own deadline. */
  get alone(): boolean {
    return this.#alone;
  }

  /** The error to reject with once fired, else undefined. */
  get error(): HistorydError | undefined {
    return this.#abort.signal.aborted ? (this.#abort.signal.reason as HistorydError) : undefined;
  }

  dispose(): void {
    this.#disposed = true; // the item settled: a late arm() (its stream took it after) arms nothing
    this.#timer?.clear();
    for (const off of this.#off.splice(0)) off();
  }
}

/** One AppendMessages call: its request queue, its waiters in order, and its reader. */
class AppendStream {
  readonly #queue: { req: RequestInit; w?: Waiter; taken?: () => void }[] = []; // taken: the transport took it
  #wake: (() => void) | undefined;
  #ended = false; // the client side is closed
  broken = false;
  readonly pending: Waiter[] = [];
  readonly done: Promise<void>;
  readonly #abort = new AbortController();
  #cancelled: HistorydError | undefined; // why cancel() ended the stream: the items' error

  constructor(client: HistorydClient, window: number, onAnswer: () => void) {
    this.#queue.push({ req: { window } });
    const responses = client.history.appendMessages(this.#requests(), { signal: this.#abort.signal });
    this.done = (async () => {
      let err: HistorydError;
      try {
        for await (const resp of responses) {
          // The answer is checked before its waiter is taken, and a malformed one rejects the
          // waiter: a throw between the two lost the waiter, whose promise never settled and whose
          // slot was never given back (issue 21 review, finding D).
          const malformed =
            resp.result.case === "error" || resp.result.value?.message !== undefined
              ? undefined
              : new HistorydError(new ConnectError("a malformed answer: neither a response with its message nor an error", Code.Internal), undefined);
          const w = this.pending.shift();
          if (w === undefined) throw new ConnectError("an answer to no item", Code.Internal);
          // A given-up item's answer settles nothing (its promise was rejected): it is dropped,
          // and its place comes back.
          w.stall?.clear();
          if (malformed !== undefined) w.reject(malformed);
          else if (resp.result.case === "error") w.reject(itemError(resp.result.value));
          else w.resolve(resp.result.value!.message!);
          onAnswer();
        }
        err = new HistorydError(new ConnectError("the append stream ended with OK before every answer", Code.Unavailable), undefined);
      } catch (e) {
        err = this.#cancelled ?? (client.closed ? clientClosedError() : toHistorydError(e));
      }
      this.broken = true;
      this.close();
      for (const w of this.pending.splice(0)) {
        w.stall?.clear();
        w.reject(new AppendStreamBrokenError(w.requestId, err));
        onAnswer();
      }
    })();
  }

  async *#requests(): AsyncIterable<RequestInit> {
    for (;;) {
      const next = this.#queue.shift();
      if (next !== undefined) {
        next.taken?.();
        yield next.req;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((r) => (this.#wake = r));
    }
  }

  /** Queues item, whose answer settles w; `taken` is called when Connect's request pump takes it
   * to write (not while the caller's own code keeps the event loop, appending a batch). False when
   * the stream is over. */
  send(item: AddMessageRequest, w: Waiter, taken?: () => void): boolean {
    if (this.broken || this.#ended) return false;
    this.pending.push(w);
    this.#queue.push({ req: { item }, w, taken });
    this.#poke();
    return true;
  }

  /** Gives up on w alone, one of its own bounds having fired (err its error), unless it is
   * answered already. Not yet taken by the transport, it leaves the stream unsent, rejecting with
   * err: true, its place to give back. Else it rejects with AppendAbandonedError of err and stays
   * in `pending` until its answer, which is dropped, gives its place back; when `stallMs` (> 0)
   * passes first, the server is taken for stalled and the stream is cancelled, as an item past the
   * appender's timeoutMs cancels it: false. */
  giveUp(w: Waiter, err: HistorydError, stallMs: number): boolean {
    const i = this.pending.indexOf(w);
    if (i < 0) return false;
    const q = this.#queue.findIndex((e) => e.w === w);
    if (q >= 0) {
      this.#queue.splice(q, 1);
      this.pending.splice(i, 1);
      w.reject(err);
      return true;
    }
    w.reject(new AppendAbandonedError(w.requestId, err));
    if (stallMs > 0) {
      w.stall = setLongTimeout(() => {
        if (!this.pending.includes(w)) return;
        const stalled = `historyd: item ${w.requestId}, given up, was not answered within ${stallMs} ms of that (the appender's timeoutMs): the append stream was cancelled`;
        this.cancel(new HistorydError(new ConnectError(stalled, Code.DeadlineExceeded), undefined));
      }, stallMs);
    }
    return false;
  }

  /** Cancels the stream, unless it is over: the items in flight reject with AppendStreamBrokenError
   * of err, and no item is sent on it any more. */
  cancel(err: HistorydError): void {
    if (this.broken) return;
    this.broken = true;
    this.#cancelled = err;
    this.#abort.abort(err);
  }

  /** Whether w is still waiting for its answer on this stream. */
  isPending(w: Waiter): boolean {
    return this.pending.includes(w);
  }

  /** Closes the client side: the server answers what it has, then ends the stream. */
  close(): void {
    this.#ended = true;
    this.#poke();
  }

  #poke(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

/** The ItemStatus of a failed item as a HistorydError: it has google.rpc.Status's fields, and its
 * details are the Anys Connect reads ErrorInfo from. */
function itemError(st: ItemStatus): HistorydError {
  const ce = new ConnectError(st.message, st.code as Code);
  (ce as { details: ConnectError["details"] }).details = st.details.map((d) => ({
    type: d.typeUrl.slice(d.typeUrl.lastIndexOf("/") + 1),
    value: d.value,
  }));
  return toHistorydError(ce);
}

/** The item as a message, once it is known to encode; else a HistorydError, INVALID_ARGUMENT, as
 * the Go client's Append reports an item it cannot encode. */
function encodable(init: AddMessageInit): AddMessageRequest {
  try {
    const item = create(AddMessageRequestSchema, init);
    toBinary(AddMessageRequestSchema, item);
    return item;
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new HistorydError(new ConnectError(`historyd: the item cannot be encoded: ${why}`, Code.InvalidArgument, undefined, undefined, e), undefined);
  }
}

/** AddMessage pipelined over one AppendMessages stream; see the file's comment. */
export class Appender {
  readonly #client: HistorydClient;
  readonly #window: number;
  readonly #timeoutMs: number;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.#end(boundError(this.#signal?.reason, "historyd: the appender's signal ended it"));
  #inFlight = 0;
  #slotWaiters: (() => void)[] = [];
  #stream: AppendStream | undefined;
  #closed = false;
  #ended: HistorydError | undefined; // the appender's signal fired: every append rejects with it
  // Wakes every append waiting for a place when the client is closed; on its close signal while
  // any waits.
  readonly #onClientClose = () => {
    this.#onClientCloseAdded = false;
    for (const wake of this.#slotWaiters.splice(0)) wake();
  };
  #onClientCloseAdded = false;

  /** An Appender over client's connection: `options` is the window, or AppenderOptions. */
  constructor(client: HistorydClient, options: number | AppenderOptions = {}) {
    const o = typeof options === "number" ? { window: options } : options;
    checkDeadline("AppenderOptions.timeoutMs", o.timeoutMs);
    this.#client = client;
    this.#window = Math.max(1, o.window ?? defaultAppendWindow);
    this.#timeoutMs = o.timeoutMs ?? client.timeoutMs ?? 0;
    this.#signal = o.signal;
    if (o.signal?.aborted) this.#onAbort();
    else o.signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Sends `req` as the next item (waiting while the window is full) and resolves to the message
   * as written, or rejects with the item's error. An empty requestId is filled in. An item that
   * cannot be encoded rejects at once, INVALID_ARGUMENT, and is not sent (see the file's comment).
   * The appender's timeoutMs bounds the wait for its answer once sent; `options` bound it from
   * now (timeoutMs, signal). Past a bound it rejects DEADLINE_EXCEEDED or CANCELED, unsent while
   * it waited for a place; once on the stream, past its own bounds as AppendAbandonedError with
   * the stream going on, past the appender's as AppendStreamBrokenError with the stream cancelled
   * (see the file's comment). */
  async append(req: AddMessageInit, options: AppendOptions = {}): Promise<Message> {
    checkDeadline("AppendOptions.timeoutMs", options.timeoutMs);
    const item = encodable({ ...req, requestId: req.requestId || randomUUID() });
    if (this.#ended !== undefined) throw this.#ended;
    if (this.#client.closed) throw clientClosedError(); // a new stream would open a new connection
    const own = options.timeoutMs;
    const bound = new ItemBound(item.requestId, options.signal, this.#signal);
    if (own !== undefined) bound.arm(own, `its deadline, ${own} ms from append(), passed`, true);
    try {
      // Only a full window waits: an await here when there is room let the appends of one tick all
      // pass the check before any took its place, and over-fill the window.
      if (this.#mustWait()) await this.#place(bound);
      if (this.#ended !== undefined) throw this.#ended;
      if (this.#closed) throw new Error("historyd: the appender is closed");
      // The client was closed while the item waited for a place: a stream now would open a new
      // connection after close().
      if (this.#client.closed) throw clientClosedError();
      bound.check(); // never send an item whose own deadline passed
      const fired = bound.error;
      if (fired !== undefined) {
        // Woken for a place and not taking it: the next waiter may (a release wakes only one).
        if (this.#inFlight < this.#window) this.#slotWaiters.shift()?.();
        throw fired;
      }
      this.#inFlight++;
      if (this.#stream === undefined || this.#stream.broken) {
        this.#stream = new AppendStream(this.#client, this.#window, () => this.#release());
      }
      const stream = this.#stream;
      return await new Promise<Message>((resolve, reject) => {
        const w = { requestId: item.requestId, resolve, reject };
        // Sent (taken by the transport): without a deadline of its own, the item has the
        // appender's timeoutMs from then for its answer. A synchronous batch of appends, which
        // keeps the event loop until its last append() returns, is not counted.
        const sent = () => {
          if (own === undefined) bound.arm(this.#timeoutMs, `no answer within ${this.#timeoutMs} ms of its sending`, false);
        };
        if (!stream.send(item, w, sent)) {
          this.#release();
          reject(new AppendStreamBrokenError(item.requestId, new HistorydError(new ConnectError("the append stream ended", Code.Unavailable), undefined)));
          return;
        }
        // A bound that fires before the answer (the file's comment): the item's own gives up on
        // it alone (unsent, its place comes back at once); the appender's cancels the stream,
        // which rejects the item with the bound's error.
        bound.signal.addEventListener("abort", () => {
          if (!stream.isPending(w)) return;
          if (!bound.alone) stream.cancel(bound.error!);
          else if (stream.giveUp(w, bound.error!, this.#timeoutMs)) this.#release();
        });
      });
    } finally {
      bound.dispose();
    }
  }

  /** Waits for a place in the window, unless the appender is closed or ended or the client
   * closed (its close wakes the wait); rejects with the bound's error when it fires first (taking
   * no place). */
  async #place(bound: ItemBound): Promise<void> {
    while (this.#mustWait()) {
      bound.check();
      const fired = bound.error;
      if (fired !== undefined) throw fired;
      // One listener on the client's close signal wakes every waiter (append() then finds the
      // client closed). A listener per waiter made a batch of 20,000 appends add and remove
      // 20,000 listeners, each in time linear in their number.
      if (!this.#onClientCloseAdded) {
        this.#client.closeSignal?.addEventListener("abort", this.#onClientClose, { once: true });
        this.#onClientCloseAdded = true;
      }
      try {
        await new Promise<void>((resolve, reject) => {
          const onFire = () => {
            const i = this.#slotWaiters.indexOf(wake);
            if (i >= 0) this.#slotWaiters.splice(i, 1);
            reject(bound.error);
          };
          const wake = () => {
            bound.signal.removeEventListener("abort", onFire);
            resolve();
          };
          this.#slotWaiters.push(wake);
          bound.signal.addEventListener("abort", onFire, { once: true });
        });
      } finally {
        if (this.#slotWaiters.length === 0 && this.#onClientCloseAdded) {
          this.#client.closeSignal?.removeEventListener("abort", this.#onClientClose);
          this.#onClientCloseAdded = false;
        }
      }
    }
  }

  /** Whether an append must wait for a place: the window is full, and the appender and its client
   * open. */
  #mustWait(): boolean {
    return !this.#closed && this.#ended === undefined && !this.#client.closed && this.#inFlight >= this.#window;
  }

  /** The appender's signal fired: the stream is cancelled, and every append waiting or to come
   * rejects with err. */
  #end(err: HistorydError): void {
    if (this.#ended !== undefined) return;
    this.#ended = err;
    for (const wake of this.#slotWaiters.splice(0)) wake();
    this.#stream?.cancel(err);
  }

  #release(): void {
    this.#inFlight--;
    this.#slotWaiters.shift()?.();
  }

  /** Stops taking items and waits for the answers of the ones in flight: at most until their
   * bounds fire, which cancels the stream (without a deadline or a signal, as long as the server
   * takes to answer). */
  async close(): Promise<void> {
    this.#closed = true;
    this.#signal?.removeEventListener("abort", this.#onAbort);
    // Every append waiting for a slot wakes now and rejects (closed): a release wakes only one, and
    // one that wakes to a closed appender takes no slot and so passes the wake on to none, which
    // left the rest waiting forever (issue 21 review, finding D).
    for (const wake of this.#slotWaiters.splice(0)) wake();
    const s = this.#stream;
    if (s === undefined) return;
    s.close();
    await s.done;
  }
}
