// A TCP proxy between a client and historyd that a test can cut: cut() destroys every connection
// it carries (both sides, as a dropped network would), refuseNext(n) closes the next n connections
// as soon as they arrive, and cutAtNextResponse() cuts a connection when the server starts an
// answer: it reads the server's HTTP/2 frames (never changing them) and drops the connection
// instead of forwarding the first HEADERS frame of a stream, so the call was applied and its answer
// is lost. Counts the connections it accepted, so a test can see a reconnect. freeze() black-holes
// the open connections (a peer gone silent: no FIN, no RST), and clientPings counts the HTTP/2 PING
// frames clients send, so a test can see keepalive at work.

import net from "node:net";

export class CuttableProxy {
  /** Connections accepted so far. */
  accepted = 0;
  readonly #server: net.Server;
  readonly #live = new Set<net.Socket>();
  #refuse = 0;
  #armed = false;
  /** Connections cut by cutAtNextResponse. */
  responseCuts = 0;
  /** PING frames clients sent (not their ACKs of the server's). */
  clientPings = 0;
  readonly #pairs: { client: net.Socket; upstream: net.Socket }[] = [];
  readonly #frozen = new Set<net.Socket>(); // client sockets whose traffic is dropped both ways
  #pingWaiters: (() => void)[] = [];

  private constructor(server: net.Server) {
    this.#server = server;
  }

  /** Listens on a free loopback port and forwards to target (host:port). */
  static async start(target: string): Promise<CuttableProxy> {
    const [host, port] = splitHostPort(target);
    let proxy: CuttableProxy | undefined;
    const server = net.createServer((client) => {
      const p = proxy!;
      p.accepted++;
      if (p.#refuse > 0) {
        p.#refuse--;
        client.destroy();
        return;
      }
      const upstream = net.connect(port, host);
      for (const s of [client, upstream]) {
        p.#live.add(s);
        s.on("close", () => p.#live.delete(s));
        s.on("error", () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      client.on("data", p.#countPings());
      upstream.on("data", p.#frames(client, upstream));
      p.#pairs.push({ client, upstream });
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    proxy = new CuttableProxy(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  /** host:port to connect to. */
  get addr(): string {
    const a = this.#server.address() as net.AddressInfo;
    return `127.0.0.1:${a.port}`;
  }

  /** Connections open now (client and upstream sides counted apart). */
  get liveSockets(): number {
    return this.#live.size;
  }

  /** Black-holes every open connection: they stay open, and what either side sends is read and
   * dropped, as when the peer's host is gone or a NAT entry expired; only keepalive pings tell a
   * client. New connections are forwarded as usual. */
  freeze(): void {
    for (const { client, upstream } of this.#pairs) {
      if (this.#frozen.has(client)) continue;
      this.#frozen.add(client);
      client.unpipe(upstream);
      client.resume(); // unpipe() paused it: the ping counter's listener keeps reading, and drops it
    }
  }

  /** Resolves once clients have sent n PING frames in all; rejects after ms. */
  async waitClientPings(n: number, ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (this.clientPings < n) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`the clients sent ${this.clientPings} PING frames, not ${n}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#pingWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** A client-to-server listener that splits the bytes into HTTP/2 frames (after the client's
   * 24-byte preface) and counts the PING frames that are not ACKs. */
  #countPings(): (chunk: Buffer) => void {
    let buf = Buffer.alloc(0);
    let preface = 24;
    return (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (preface > 0) {
        const n = Math.min(preface, buf.length);
        buf = buf.subarray(n);
        preface -= n;
      }
      while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
        const length = buf.readUIntBE(0, 3);
        if (buf[3] === 6 && (buf[4]! & 1) === 0) {
          this.clientPings++;
          for (const w of this.#pingWaiters.splice(0)) w();
        }
        buf = buf.subarray(9 + length);
      }
    };
  }

  /** Drops every connection the proxy carries. */
  cut(): void {
    for (const s of this.#live) s.destroy();
  }

  /** Cuts the connection that carries the next answer, before the client sees any of it. */
  cutAtNextResponse(): void {
    this.#armed = true;
  }

  /** The server-to-client forwarder: splits the byte stream into HTTP/2 frames (9-byte header:
   * 24-bit length, type, flags, 31-bit stream id; the server sends no preface) and forwards them,
   * unless armed and the frame is a HEADERS (type 1) of a stream. */
  #frames(client: net.Socket, upstream: net.Socket): (chunk: Buffer) => void {
    let buf = Buffer.alloc(0);
    let payloadLeft = 0;
    return (chunk: Buffer) => {
      if (this.#frozen.has(client)) return;
      buf = Buffer.concat([buf, chunk]);
      while (buf.length > 0) {
        if (payloadLeft > 0) {
          const n = Math.min(payloadLeft, buf.length);
          client.write(buf.subarray(0, n));
          buf = buf.subarray(n);
          payloadLeft -= n;
          continue;
        }
        if (buf.length < 9) return;
        const length = buf.readUIntBE(0, 3);
        const type = buf[3];
        const stream = buf.readUInt32BE(5) & 0x7fffffff;
        if (this.#armed && type === 1 && stream > 0) {
          this.#armed = false;
          this.responseCuts++;
          client.destroy();
          upstream.destroy();
          return;
        }
        client.write(buf.subarray(0, 9));
        buf = buf.subarray(9);
        payloadLeft = length;
      }
    };
  }

  /** Closes the next n connections on arrival. */
  refuseNext(n: number): void {
    this.#refuse = n;
  }

  /** Cuts everything and stops listening. */
  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function splitHostPort(addr: string): [string, number] {
  const i = addr.lastIndexOf(":");
  return [addr.slice(0, i), Number(addr.slice(i + 1))];
}
