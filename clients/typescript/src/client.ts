// The client: one HTTP/2 connection (Connect's gRPC transport) shared by both services, the typed
// generated stubs, and the conveniences on top (Branch, Exchange).

import type { SecureClientSessionOptions } from "node:http2";

import type { DescService } from "@bufbuild/protobuf";

import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { Appender, type AppenderOptions } from "./appender.js";
import { Branch, type CreateBranchOptions, type ImportOptions } from "./branch.js";
import { clientClosedError, type HistorydError, toHistorydError } from "./errors.js";
import { connectionOpener } from "./connection.js";
import { Exchange } from "./exchange.js";
import { type JsonValue, jsonText } from "./json.js";
import { withDefaults } from "./options.js";
import { checkRetryPolicy, defaultRetryPolicy, retryInterceptor, type RetryPolicy } from "./retry.js";
import { checkDeadline, checkRange, maxTimerMs } from "./timer.js";
import { ExchangeService } from "./gen/historyd/v1/exchange_service_pb.js";
import { HistoryService } from "./gen/historyd/v1/history_service_pb.js";

/** TLS settings: Node's TLS options of an HTTP/2 session (ca, cert and key for mutual TLS,
 * servername, ...). */
export type TlsOptions = Pick<SecureClientSessionOptions, "ca" | "cert" | "key" | "servername" | "rejectUnauthorized" | "minVersion">;

/** Options of connect(). */
export interface ClientOptions {
  /**
   * TLS: `true` (the default) for TLS with the system roots, TLS options, or `false` for plaintext,
   * as to a historyd started with the defaults (`make run`). An address with an `http://` or
   * `https://` scheme decides it instead.
   */
  tls?: boolean | TlsOptions;
  /** Sends `authorization: Bearer <token>` on every call (a server started with auth tokens). Over
   * plaintext the token travels in clear text; allowed, for tests and loopback. */
  token?: string;
  /** The deadline of every unary call the conveniences make, in ms (default 30 s); 0 means none;
   * any length up to Infinity (see callOptions); NaN or a negative value throws a RangeError.
   * Calls through `history` and `exchangeService` take Connect's `timeoutMs` call option instead,
   * one longer than grpc-timeout carries (27.7 hours) sent as that too. */
  timeoutMs?: number;
  /** The retry policy of unary calls (defaultRetryPolicy; a field left out or given as undefined
   * keeps its default); `{maxAttempts: 1}` turns retries off. A field out of its range
   * (RetryPolicy) throws a RangeError naming it. */
  retry?: Partial<RetryPolicy>;
  /** More interceptors; they run inside the retry interceptor, so once per attempt. */
  interceptors?: Interceptor[];
  /** HTTP/2 keepalive pings: `true` for defaultKeepalive, KeepaliveOptions (a field left out or
   * given as undefined keeps defaultKeepalive's), or absent/`false` for none (the default). See
   * KeepaliveOptions for the bounds historyd enforces. */
  keepalive?: boolean | KeepaliveOptions;
}

/**
 * HTTP/2 keepalive (connect-node's Http2SessionManager ping options, gRPC core's
 * GRPC_ARG_KEEPALIVE_*): while a call is open, a connection that has received nothing for `timeMs`
 * is pinged, and closed when the ping is not answered within `timeoutMs`; its calls fail
 * UNAVAILABLE (a watch resumes, unary calls are retried by their policy). Without it a connection
 * whose peer vanished (a host gone, a NAT entry dropped) keeps a watch or an appender waiting until
 * the OS gives up on the socket, which can take hours.
 *
 * historyd disconnects a client that pings more often than its `--keepalive-min-time` (10 s by
 * default) with GOAWAY `too_many_pings`, and by default counts a ping on a connection with no call
 * open as one too many (`--keepalive-permit-without-stream=false`): keep `timeMs` at or above the
 * server's min time, and `permitWithoutCalls` false unless the server permits it.
 *
 * Both times go from 1 ms to 2^31-1 ms, setTimeout's longest delay; one out of that range throws a
 * RangeError naming it when the client is made (connect-node arms them with setTimeout: past 2^31-1
 * ms it never pings, and at 0 or NaN it pings without pause, which historyd answers with GOAWAY).
 */
export interface KeepaliveOptions {
  /** Ping a connection quiet this long, in ms (default 30 s; pingIntervalMs; 1 to 2^31-1). */
  timeMs?: number;
  /** Close it when a ping is not answered within this, in ms (default 20 s; pingTimeoutMs; 1 to
   * 2^31-1). */
  timeoutMs?: number;
  /** Ping connections with no open call too (default false; pingIdleConnection). */
  permitWithoutCalls?: boolean;
}

/** The keepalive of `keepalive: true`: within historyd's default enforcement (see
 * KeepaliveOptions). */
export const defaultKeepalive: Readonly<Required<KeepaliveOptions>> = { timeMs: 30_000, timeoutMs: 20_000, permitWithoutCalls: false };

/** The default deadline of a unary call, in ms. */
export const defaultTimeoutMs = 30_000;

/** A historyd client. `history` and `exchangeService` are the generated stubs, typed and with
 * typed oneofs, over one HTTP/2 connection; `exchange` and the methods here are the conveniences. */
export class HistorydClient {
  /** HistoryService, generated: every RPC, typed. Errors are HistorydErrors. */
  readonly history: Client<typeof HistoryService>;
  /** ExchangeService, generated. */
  readonly exchangeService: Client<typeof ExchangeService>;
  /** The Exchange's conveniences. */
  readonly exchange: Exchange;
  /** The deadline the conveniences give each unary call, in ms (0: none). */
  readonly timeoutMs: number;
  readonly transport: Transport;
  readonly #sessions: Http2SessionManager;
  readonly #closing = new AbortController();

  constructor(address: string, options: ClientOptions = {}) {
    checkDeadline("timeoutMs", options.timeoutMs);
    const retry = checkRetryPolicy(withDefaults(defaultRetryPolicy, options.retry), "retry");
    const { baseUrl, tls } = baseUrlOf(address, options.tls ?? true);
    const closing = this.#closing.signal;
    // Every connection is opened through connectionOpener, which refuses once the client is closed.
    this.#sessions = new Http2SessionManager(baseUrl, sessionOptions(options.keepalive), { ...(tls === false ? {} : tls), createConnection: connectionOpener(closing) });
    const interceptors: Interceptor[] = [callGuard(closing), retryInterceptor(retry, closing)];
    if (options.token !== undefined) interceptors.push(tokenInterceptor(options.token));
    interceptors.push(...(options.interceptors ?? []));
    this.transport = createGrpcTransport({ baseUrl, sessionManager: this.#sessions, interceptors });
    this.history = typedErrors(HistoryService, createClient(HistoryService, this.transport), closing);
    this.exchangeService = typedErrors(ExchangeService, createClient(ExchangeService, this.transport), closing);
    this.exchange = new Exchange(this);
    this.timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
  }

  /** Call options of a unary call the conveniences make. A deadline longer than grpc-timeout
   * carries (8 digits of ms: 27.7 hours), Infinity included, is sent as that: Connect arms it
   * with setTimeout, which fires after 1 ms past 2^31-1 ms, and the server refuses a longer
   * header. */
  callOptions(signal?: AbortSignal): { timeoutMs?: number; signal?: AbortSignal } {
    return { timeoutMs: this.timeoutMs > 0 ? Math.min(this.timeoutMs, maxCallTimeoutMs) : undefined, signal };
  }

  /** Creates a branch; `system` gives it a System (LionAGI's default text when `""`). */
  async createBranch(options: CreateBranchOptions = {}): Promise<Branch> {
    const resp = await this.history.createBranch(
      {
        requestId: options.requestId ?? "",
        branchId: options.id ?? "",
        name: options.name,
        user: options.user,
        metadata: options.metadata,
        system:
          options.system === undefined && options.systemDatetime === undefined
            ? undefined
            : {
                systemMessage: options.system,
                systemDatetime:
                  options.systemDatetime === undefined
                    ? { case: undefined }
                    : options.systemDatetime === true
                      ? { case: "datetimeNow", value: true }
                      : { case: "datetimeText", value: options.systemDatetime },
              },
        systemSender: options.systemSender,
      },
      this.callOptions(options.signal),
    );
    return new Branch(this, resp.branch!.id, resp.branch);
  }

  /** The branch with this id (no call is made). */
  branch(id: string): Branch {
    return new Branch(this, id);
  }

  /** Imports LionAGI JSON (a Branch.to_dict, a Pile.to_dict or a list of message dicts), given as
   * a value or as JSON text. */
  async importBranch(data: JsonValue | string, options: ImportOptions = {}): Promise<Branch> {
    const resp = await this.history.importBranch(
      {
        requestId: options.requestId ?? "",
        data: typeof data === "string" ? data : jsonText(data),
        branchId: options.id ?? "",
        newBranchId: options.newId ?? false,
        dbMetaKey: options.dbMetaKey ?? "",
      },
      this.callOptions(options.signal),
    );
    return new Branch(this, resp.branch!.id, resp.branch);
  }

  /** An Appender: AddMessage pipelined over one AppendMessages stream, up to `window` items in
   * flight (issue 21). `options` is the window, or AppenderOptions: how long each item may wait for
   * its answer once sent (`timeoutMs`, this client's timeoutMs by default) and a `signal` that ends
   * the appender. */
  appender(options?: number | AppenderOptions): Appender {
    return new Appender(this, options);
  }

  /** Closes the connection for good: no connection is opened after it, whatever asks for one.
   * Calls in flight fail, wherever they are (in an interceptor, waiting for the connection or a
   * keepalive ping, on the stream), and every call made after, through the conveniences, the
   * generated stubs or `transport` (unary, stream, watch, inbox subscription, append), fails at
   * once, with the HistorydError of a closed client: code CANCELED, "historyd: the client was
   * closed" (clientClosedError). So do a unary call pausing between retries (at once, with no other
   * attempt), a watch (instead of resuming; one pausing between resumes at once) and an appender's
   * items (the ones in flight, and every later append). connect-node's session manager opens a new
   * connection for a request it holds after its abort(): the connections it opens go through
   * connectionOpener, which refuses them once the client is closed (connection.ts). */
  close(): void {
    this.#closing.abort(clientClosedError());
    this.#sessions.abort();
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closing.signal.aborted;
  }

  /** Aborted by close() (its reason the CANCELED HistorydError of a closed client): a watch pausing
   * between resumes, or an append waiting for a place, wakes on it and ends. */
  get closeSignal(): AbortSignal {
    return this.#closing.signal;
  }
}

/** The longest deadline a call is sent with: grpc-timeout takes 8 digits (here of ms), about
 * 27.7 hours. */
const maxCallTimeoutMs = 99_999_999;

/** Connects to historyd at `address` (`host:port`, or a URL with http:// or https://). */
export function connect(address: string, options: ClientOptions = {}): HistorydClient {
  return new HistorydClient(address, options);
}

/** The session manager's options: the idle timeout, and the keepalive pings asked for (their times
 * checked: KeepaliveOptions). Exported for its test; not part of the package's API (index.ts). */
export function sessionOptions(keepalive: boolean | KeepaliveOptions | undefined): ConstructorParameters<typeof Http2SessionManager>[1] {
  const base = { idleConnectionTimeoutMs: 60_000 };
  if (keepalive === undefined || keepalive === false) return base;
  const k = withDefaults(defaultKeepalive, keepalive === true ? {} : keepalive);
  const range = `a number of ms from 1 to ${maxTimerMs} (setTimeout's longest delay)`;
  checkRange("keepalive.timeMs", k.timeMs, 1, maxTimerMs, range);
  checkRange("keepalive.timeoutMs", k.timeoutMs, 1, maxTimerMs, range);
  return { ...base, pingIntervalMs: k.timeMs, pingTimeoutMs: k.timeoutMs, pingIdleConnection: k.permitWithoutCalls };
}

function baseUrlOf(address: string, tls: boolean | TlsOptions): { baseUrl: string; tls: false | SecureClientSessionOptions } {
  if (address.startsWith("http://")) return { baseUrl: address, tls: false };
  if (address.startsWith("https://")) return { baseUrl: address, tls: typeof tls === "object" ? tls : {} };
  if (tls === false) return { baseUrl: `http://${address}`, tls: false };
  return { baseUrl: `https://${address}`, tls: tls === true ? {} : tls };
}

/** The outermost interceptor: a call on a closed client fails with clientClosedError before any
 * other interceptor or the transport runs (HistorydClient.close). A call already past it when the
 * client is closed is refused its connection instead (connection.ts). A call whose signal is
 * aborted already (the caller's, or a deadline that passed) fails here too, as Connect fails it
 * (with the signal's reason), before the transport opens a connection for it: otherwise it ended
 * the same, but only once a connection was opened and the call sent. It rejects rather than
 * throws: Connect clears a call's deadline timer when the interceptors' promise settles, and a
 * synchronous throw left the timer holding the process for the deadline. */
function callGuard(closing: AbortSignal): Interceptor {
  return (next) => async (req) => {
    if (closing.aborted) throw clientClosedError();
    if (req.signal.aborted) throw ConnectError.from(req.signal.reason, Code.Canceled);
    return await next(req);
  };
}

/** Connect's call options, as far as the wrapper below reads them. */
type StubCallOptions = { signal?: AbortSignal; timeoutMs?: number };

/** The generated client with every error a HistorydError: unary calls reject with one, and the
 * iteration of a stream throws one. Wrapped around the client rather than in an interceptor,
 * because Connect replaces an interceptor's error by the signal's reason on a deadline or a
 * cancellation. A call in flight when the client is closed (`closing` aborted) fails with the
 * closed client's error rather than as a lost connection (UNAVAILABLE): the loss is the close. A
 * call's `timeoutMs` longer than grpc-timeout carries is sent as that, as callOptions does. */
function typedErrors<T extends DescService>(service: T, client: Client<T>, closing: AbortSignal): Client<T> {
  const out: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (client as Record<string, (req: unknown, opts?: StubCallOptions) => unknown>)[method.localName]!;
    if (method.methodKind === "unary" || method.methodKind === "client_streaming") {
      // One answer: a promise.
      out[method.localName] = async (req: unknown, opts?: StubCallOptions) => {
        try {
          return await fn(req, longDeadline(opts));
        } catch (err) {
          throw callError(err, opts?.signal, closing);
        }
      };
    } else {
      // A stream of answers (server or bidi streaming): an async iterable.
      out[method.localName] = (req: unknown, opts?: StubCallOptions) =>
        streamCall((o) => fn(req, o) as AsyncIterable<unknown>, longDeadline(opts), closing);
    }
  }
  return out as Client<T>;
}

/** opts with a timeoutMs past grpc-timeout's 8 digits (Infinity included) lowered to that: Connect
 * arms the deadline with setTimeout, which fires after 1 ms past 2^31-1 ms, and sends it as
 * grpc-timeout, which the server refuses (HTTP 400) past 8 digits. */
function longDeadline(opts: StubCallOptions | undefined): StubCallOptions | undefined {
  const ms = opts?.timeoutMs;
  return ms !== undefined && ms > maxCallTimeoutMs ? { ...opts, timeoutMs: maxCallTimeoutMs } : opts;
}

/**
 * A stream call, started when it is first iterated, that ends when the caller leaves it. Connect's
 * stream iterator has no return(): a loop left early (`break`, `return`, a throw in its body) left
 * the call open, the server's stream until the client closed, and a `timeoutMs` timer holding the
 * process until the deadline (Connect clears it only when a next() settles). So the call gets a
 * signal of its own, linked to the caller's, which is aborted when the loop is left before the
 * stream's end; the iterator is then read to its error, which makes Connect clear the timer, and
 * the loop's exit waits for it.
 */
async function* streamCall<T>(start: (opts: StubCallOptions) => AsyncIterable<T>, opts: StubCallOptions | undefined, closing: AbortSignal): AsyncIterable<T> {
  const caller = opts?.signal;
  const abort = new AbortController();
  const onAbort = () => abort.abort(caller?.reason);
  if (caller?.aborted) onAbort();
  else caller?.addEventListener("abort", onAbort, { once: true });
  let over = false; // the stream ended, by its end or by an error
  let it: AsyncIterator<T> | undefined;
  try {
    it = start({ ...opts, signal: abort.signal })[Symbol.asyncIterator]();
    for (;;) {
      const r = await it.next();
      if (r.done) {
        over = true;
        return;
      }
      yield r.value;
    }
  } catch (err) {
    over = true;
    throw callError(err, caller, closing);
  } finally {
    caller?.removeEventListener("abort", onAbort);
    if (!over && it !== undefined) {
      abort.abort(new ConnectError("historyd: the caller left the stream", Code.Canceled));
      try {
        while (!(await it.next()).done); // what was read before the reset, then its error
      } catch {
        // the call's end, as asked
      }
    }
  }
}

/** A call's error as a HistorydError: the closed client's once `closing` is aborted and the call
 * failed by the transport (no status from the server, no cancellation by the caller). */
function callError(err: unknown, signal: AbortSignal | undefined, closing: AbortSignal): HistorydError {
  const e = toHistorydError(err, signal);
  if (closing.aborted && e.reasonName === "" && !(signal?.aborted ?? false) && [Code.Unavailable, Code.Canceled].includes(e.code)) {
    return clientClosedError();
  }
  return e;
}

function tokenInterceptor(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}
