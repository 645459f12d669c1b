// Typed errors. Every non-OK status historyd sends carries a google.rpc.ErrorInfo (domain
// "historyd") in the google.rpc.Status of the grpc-status-details-bin trailer (DESIGN.md "Errors":
// switch on the reason, not on the message text). Connect decodes that Status; the ErrorInfo is
// read with the stubs generated from the vendored clients/vendor/google/rpc protos.

import { Code, ConnectError } from "@connectrpc/connect";

import { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason, ErrorReasonSchema } from "./gen/historyd/v1/error_reason_pb.js";

export { Code, ErrorReason };

/**
 * A failed call: a ConnectError (so `code`, `rawMessage` and `metadata` are Connect's) with the
 * server's ErrorInfo. `reason` is the ErrorReason enum value, or undefined for a reason this client
 * does not know (a newer server; `reasonName` still has its text) and for an error without
 * ErrorInfo (a transport failure). `info` is the ErrorInfo's metadata (lowerCamel keys, string
 * values, e.g. `branchId`, `lastSequence`).
 */
export class HistorydError extends ConnectError {
  // `name` stays "ConnectError": Connect recognises its errors by name (ConnectError's
  // Symbol.hasInstance), and an error it does not recognise it wraps again, losing this class.

  /** instanceof by the prototype chain: ConnectError's own check would take any ConnectError for
   * a HistorydError. */
  static override [Symbol.hasInstance](v: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(this, v);
  }

  /** The reason as the enum, undefined when unknown to this client or absent. */
  readonly reason: ErrorReason | undefined;
  /** The reason's text as sent, e.g. "ERROR_REASON_BRANCH_NOT_FOUND"; "" without ErrorInfo. */
  readonly reasonName: string;
  /** The ErrorInfo's domain ("historyd"); "" without ErrorInfo. */
  readonly domain: string;
  /** The ErrorInfo's metadata. */
  readonly info: Readonly<Record<string, string>>;

  constructor(err: ConnectError, errorInfo: ErrorInfo | undefined) {
    super(err.rawMessage, err.code, err.metadata, undefined, err);
    // The incoming details (the decoded google.rpc.Status's), so findDetails keeps working.
    (this as { details: ConnectError["details"] }).details = err.details;
    this.reasonName = errorInfo?.reason ?? "";
    this.domain = errorInfo?.domain ?? "";
    this.info = { ...(errorInfo?.metadata ?? {}) };
    const known = ErrorReasonSchema.values.find((v) => v.name === this.reasonName);
    this.reason = known === undefined ? undefined : (known.number as ErrorReason);
    // ConnectError's constructor sets the prototype to ConnectError's; restore the subclass's.
    Object.setPrototypeOf(this, new.target.prototype);
  }

  /** Whether the error has the given reason. */
  is(reason: ErrorReason): boolean {
    return this.reason === reason;
  }
}

/** A watch cursor that the server no longer has (OUT_OF_RANGE, ERROR_REASON_HISTORY_COMPACTED):
 * re-read the branch and watch from its head (WatchBranch doc). `info` has oldestSequence and
 * headSequence. */
export class HistoryCompactedError extends HistorydError {}

/** The watched branch was deleted (NOT_FOUND, ERROR_REASON_BRANCH_DELETED): the stream ends after
 * the BRANCH_DELETED commit. */
export class BranchDeletedError extends HistorydError {}

/** The error of a watch or an append on a client that was closed (HistorydClient.close):
 * CANCELED. */
export function clientClosedError(): HistorydError {
  return new HistorydError(new ConnectError("historyd: the client was closed", Code.Canceled), undefined);
}

/** The classes of the reasons a caller most often handles apart; every other reason is a
 * HistorydError to switch on by `reason`. */
const classes = new Map<string, new (err: ConnectError, info: ErrorInfo | undefined) => HistorydError>([
  ["ERROR_REASON_HISTORY_COMPACTED", HistoryCompactedError],
  ["ERROR_REASON_BRANCH_DELETED", BranchDeletedError],
]);

/**
 * Turns any error of a call into a HistorydError (unchanged if it is one already). `signal` is the
 * caller's: connect-node reports a dropped connection as CANCELED (the HTTP/2 stream's reset code),
 * which, when the caller did not cancel and the server sent no ErrorInfo, is a transport failure
 * and becomes UNAVAILABLE, as gRPC's other clients report it.
 */
export function toHistorydError(err: unknown, signal?: AbortSignal): HistorydError {
  if (err instanceof HistorydError) return err;
  let ce = ConnectError.from(err);
  if (isConnectionLoss(ce, signal)) {
    ce = new ConnectError(`connection lost: ${ce.rawMessage}`, Code.Unavailable, ce.metadata, undefined, ce);
  }
  const info = ce.findDetails(ErrorInfoSchema)[0];
  const cls = classes.get(info?.reason ?? "") ?? HistorydError;
  return new cls(ce, info);
}

/** Whether err is a dropped connection: no status from the server (no ErrorInfo), no cancellation
 * by the caller, and either CANCELED (connect-node's code for a reset HTTP/2 stream) or ABORTED
 * caused by a reset or broken socket (connect-node's code for ECONNRESET, which CI met once as
 * "[aborted] read ECONNRESET" on a write whose answer the test proxy cut: not retried, it failed). */
export function isConnectionLoss(err: ConnectError, signal?: AbortSignal): boolean {
  if (err.findDetails(ErrorInfoSchema).length > 0 || (signal?.aborted ?? false)) return false;
  return err.code === Code.Canceled || (err.code === Code.Aborted && socketLost(err.cause));
}

/** Whether a Node.js error in cause's chain is a reset or broken socket. */
function socketLost(cause: unknown): boolean {
  for (let e = cause, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === "ECONNRESET" || code === "EPIPE") return true;
  }
  return false;
}
