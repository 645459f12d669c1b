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

import { randomUUID } from "node:crypto";

import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import type { HistorydClient } from "./client.js";
import { HistorydError, toHistorydError } from "./errors.js";
import type { Message } from "./gen/historyd/v1/envelope_pb.js";
import {
  AddMessageRequestSchema,
  type AddMessageRequest,
  type AppendMessagesRequestSchema,
  type ItemStatus,
} from "./gen/historyd/v1/history_service_pb.js";

/** The default window: 64 items in flight, where the server's group commit has most of its gain. */
export const defaultAppendWindow = 64;

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

interface Waiter {
  requestId: string;
  resolve: (m: Message) => void;
  reject: (e: Error) => void;
}

/** One AppendMessages call: its request queue, its waiters in order, and its reader. */
class AppendStream {
  readonly #queue: RequestInit[] = [];
  #wake: (() => void) | undefined;
  #ended = false; // the client side is closed
  broken = false;
  readonly pending: Waiter[] = [];
  readonly done: Promise<void>;

  constructor(client: HistorydClient, window: number, onAnswer: () => void) {
    this.#queue.push({ window });
    const responses = client.history.appendMessages(this.#requests());
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
          if (malformed !== undefined) w.reject(malformed);
          else if (resp.result.case === "error") w.reject(itemError(resp.result.value));
          else w.resolve(resp.result.value!.message!);
          onAnswer();
        }
        err = new HistorydError(new ConnectError("the append stream ended with OK before every answer", Code.Unavailable), undefined);
      } catch (e) {
        err = toHistorydError(e);
      }
      this.broken = true;
      this.close();
      for (const w of this.pending.splice(0)) {
        w.reject(new AppendStreamBrokenError(w.requestId, err));
        onAnswer();
      }
    })();
  }

  async *#requests(): AsyncIterable<RequestInit> {
    for (;;) {
      const next = this.#queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((r) => (this.#wake = r));
    }
  }

  send(item: AddMessageRequest, w: Waiter): boolean {
    if (this.broken || this.#ended) return false;
    this.pending.push(w);
    this.#queue.push({ item });
    this.#poke();
    return true;
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
  #inFlight = 0;
  #slotWaiters: (() => void)[] = [];
  #stream: AppendStream | undefined;
  #closed = false;

  constructor(client: HistorydClient, window = defaultAppendWindow) {
    this.#client = client;
    this.#window = Math.max(1, window);
  }

  /** Sends `req` as the next item (waiting while the window is full) and resolves to the message
   * as written, or rejects with the item's error. An empty requestId is filled in. An item that
   * cannot be encoded rejects at once, INVALID_ARGUMENT, and is not sent (see the file's comment). */
  async append(req: AddMessageInit): Promise<Message> {
    const item = encodable({ ...req, requestId: req.requestId || randomUUID() });
    while (!this.#closed && this.#inFlight >= this.#window) await new Promise<void>((r) => this.#slotWaiters.push(r));
    if (this.#closed) throw new Error("historyd: the appender is closed");
    this.#inFlight++;
    if (this.#stream === undefined || this.#stream.broken) {
      this.#stream = new AppendStream(this.#client, this.#window, () => this.#release());
    }
    return new Promise<Message>((resolve, reject) => {
      if (!this.#stream!.send(item, { requestId: item.requestId, resolve, reject })) {
        this.#release();
        reject(new AppendStreamBrokenError(item.requestId, new HistorydError(new ConnectError("the append stream ended", Code.Unavailable), undefined)));
      }
    });
  }

  #release(): void {
    this.#inFlight--;
    this.#slotWaiters.shift()?.();
  }

  /** Stops taking items and waits for the answers of the ones in flight. */
  async close(): Promise<void> {
    this.#closed = true;
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
