// The client's connections: every HTTP/2 connection connect-node's session manager opens goes
// through connectionOpener, which refuses once the client is closed.
//
// close() aborts the session manager, but the manager opens a new connection for any request it
// still holds or is given later: request() tries again when its session was destroyed under it,
// and verify() (keepalive's ping of an idle connection before a call) opens a new one when its ping
// fails, which close() makes it do. A check before the transport (the call guard interceptor)
// cannot see those, nor a call that an interceptor of the caller's holds across close(): each of
// them reconnected, and was answered. Refusing the connection itself is the one place no path goes
// around.

import net from "node:net";
import type { ClientSessionOptions, SecureClientSessionOptions } from "node:http2";
import type { Duplex } from "node:stream";
import tls from "node:tls";

import { clientClosedError } from "./errors.js";

/** http2.connect's createConnection: a connection to the authority, as http2.connect makes it
 * itself without the option, or, once `closing` is aborted, a throw of the closed client's error
 * (HistorydError, CANCELED, "historyd: the client was closed"). The throw comes out of the session
 * manager's request(), so the call fails with it, and nothing is opened or left behind. */
export function connectionOpener(closing: AbortSignal): (authority: URL, options: ClientSessionOptions | SecureClientSessionOptions) => Duplex {
  return (authority, options) => {
    if (closing.aborted) throw clientClosedError();
    return openSocket(authority, options);
  };
}

/** The socket http2.connect opens when it is given no createConnection (Node 20's
 * lib/internal/http2/core.js connect() and initializeTLSOptions()): TCP for http:, TLS offering h2
 * by ALPN for https:, with the server name of a host that is not an IP address. */
function openSocket(authority: URL, options: ClientSessionOptions | SecureClientSessionOptions): Duplex {
  const port = Number(authority.port !== "" ? authority.port : authority.protocol === "http:" ? 80 : 443);
  let host = authority.hostname || "localhost";
  if (host.startsWith("[")) host = host.slice(1, -1);
  const { createConnection: _, ...rest } = options;
  if (authority.protocol === "http:") return net.connect({ port, host, ...rest });
  const secure = rest as SecureClientSessionOptions;
  const servername = secure.servername || (net.isIP(host) ? undefined : host);
  return tls.connect(port, host, { ...secure, ALPNProtocols: ["h2"], ...(servername === undefined ? {} : { servername }) });
}
