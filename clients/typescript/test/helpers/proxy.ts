// A TCP proxy between a client and historyd that a test can cut: cut() destroys every connection
// it carries (both sides, as a dropped network would), refuseNext(n) closes the next n connections
// as soon as they arrive. Counts the connections it accepted, so a test can see a reconnect.

import net from "node:net";

export class CuttableProxy {
  /** Connections accepted so far. */
  accepted = 0;
  readonly #server: net.Server;
  readonly #live = new Set<net.Socket>();
  #refuse = 0;

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
      upstream.pipe(client);
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

  /** Drops every connection the proxy carries. */
  cut(): void {
    for (const s of this.#live) s.destroy();
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
