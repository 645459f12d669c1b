// historyd's TypeScript client: the entry point. See README.md.

export { VERSION } from "./version.js";
export {
  connect,
  HistorydClient,
  defaultKeepalive,
  defaultTimeoutMs,
  type ClientOptions,
  type KeepaliveOptions,
  type TlsOptions,
} from "./client.js";
export {
  Branch,
  ContextMode,
  MessageView,
  SerializationMode,
  type BranchInfo,
  type CallOptions,
  type ChatMessageJSON,
  type CreateBranchOptions,
  type ImportOptions,
  type InstructionOptions,
  type MessagesOptions,
  type RoutingOptions,
  type WriteOptions,
} from "./branch.js";
export { BranchWatch, type WatchItem, type WatchOptions } from "./watch.js";
export { Exchange } from "./exchange.js";
export { Appender, AppendAbandonedError, AppendStreamBrokenError, defaultAppendWindow, type AppendOptions, type AppenderOptions } from "./appender.js";
export { BranchDeletedError, Code, ErrorReason, HistoryCompactedError, HistorydError, toHistorydError } from "./errors.js";
export {
  genericContent,
  jsonText,
  jsonToValue,
  parseJSON,
  participantOf,
  participantValue,
  valueToJSON,
  type JsonObject,
  type JsonValue,
  type Participant,
} from "./json.js";
export { backoffMs, defaultRetryPolicy, readOnlyMethods, type RetryPolicy } from "./retry.js";
export { EventKind } from "./gen/historyd/v1/history_service_pb.js";
export { MessageRole, type Message } from "./gen/historyd/v1/envelope_pb.js";
export { DeadLetterReason } from "./gen/historyd/v1/exchange_service_pb.js";
