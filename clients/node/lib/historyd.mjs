// A small Node.js client of historyd: the .proto files of the repository loaded at runtime with
// @grpc/proto-loader, the two services as @grpc/grpc-js clients, promise wrappers for unary calls,
// and the google.rpc.ErrorInfo of a failed call (README: "switch on the reason, not on the message
// text"). The tests under test/ and writer.mjs use it; nothing here is generated.

import { fileURLToPath } from 'node:url';
import path from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

import { decodeErrorInfo } from './rpcstatus.mjs';

/** The repository root: clients/node/lib/ is three levels below it. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** Options of proto-loader: field names as in the .proto files, enums as their names, 64-bit
 * integers as decimal strings (uint64 sequences do not fit a JS number in general), oneof virtual
 * fields naming the case that is set, and no defaults filled in, so an absent field stays absent. */
const loaderOptions = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [path.join(repoRoot, 'proto')],
};

/** Loads historyd.v1 from proto/ (the same files the server is generated from). */
export function loadHistorydPackage() {
  const def = protoLoader.loadSync(
    ['historyd/v1/history_service.proto', 'historyd/v1/exchange_service.proto'],
    loaderOptions,
  );
  return grpc.loadPackageDefinition(def).historyd.v1;
}

/** Wraps every unary method of a grpc-js client in a promise-returning function; server-streaming
 * methods return their ClientReadableStream, whose errors get `errorInfo` too. */
function promisify(client, service) {
  const out = { raw: client };
  for (const [name, method] of Object.entries(service.service)) {
    if (method.responseStream) {
      out[name] = (req, metadata = new grpc.Metadata(), options = {}) => {
        const call = client[name](req, metadata, options);
        call.on('error', withErrorInfo); // first listener: later ones see errorInfo
        return call;
      };
      continue;
    }
    out[name] = (req, options = {}) =>
      new Promise((resolve, reject) => {
        client[name](req, new grpc.Metadata(), { deadline: Date.now() + 10_000, ...options }, (err, resp) =>
          err ? reject(withErrorInfo(err)) : resolve(resp),
        );
      });
  }
  return out;
}

/** Adds `errorInfo` ({reason, domain, metadata}) to a grpc-js error from its grpc-status-details-bin
 * trailer, when the server sent one. */
export function withErrorInfo(err) {
  const details = err?.metadata?.get?.('grpc-status-details-bin') ?? [];
  if (details.length > 0) {
    err.errorInfo = decodeErrorInfo(details[0]);
  }
  return err;
}

/** Connects to historyd at addr (plaintext) and returns {history, exchange, close}. */
export function connect(addr) {
  const pkg = loadHistorydPackage();
  const creds = grpc.credentials.createInsecure();
  const history = new pkg.HistoryService(addr, creds);
  const exchange = new pkg.ExchangeService(addr, creds, { channelOverride: history.getChannel() });
  return {
    history: promisify(history, pkg.HistoryService),
    exchange: promisify(exchange, pkg.ExchangeService),
    close() {
      history.close();
    },
  };
}

// The well-known types keep protobufjs's own camelCase field names (stringValue, nullValue) even
// with keepCase.

/** A google.protobuf.Value holding a string (a participant: DESIGN.md "Participants"). */
export const str = (s) => ({ stringValue: s });

/** The google.protobuf.Value JSON null (an explicit None; as a recipient, a broadcast). */
export const nullValue = () => ({ nullValue: 'NULL_VALUE' });

/** The text of a google.protobuf.Value that holds a string, else undefined. */
export const valueText = (v) => (v && v.kind === 'stringValue' ? v.stringValue : undefined);

/** A google.protobuf.Struct or Value as plain JSON (metadata, metadata.model_response). */
export function toJSON(v) {
  if (v === undefined || v === null) return v;
  if ('fields' in v && !('kind' in v)) {
    return Object.fromEntries(Object.entries(v.fields ?? {}).map(([k, x]) => [k, toJSON(x)]));
  }
  switch (v.kind) {
    case 'nullValue':
      return null;
    case 'numberValue':
      return v.numberValue;
    case 'stringValue':
      return v.stringValue;
    case 'boolValue':
      return v.boolValue;
    case 'structValue':
      return toJSON(v.structValue);
    case 'listValue':
      return (v.listValue.values ?? []).map(toJSON);
    default:
      throw new Error(`toJSON: not a google.protobuf.Value: ${JSON.stringify(v)}`);
  }
}
