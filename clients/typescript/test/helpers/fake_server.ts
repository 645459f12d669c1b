// What the client tests that need a misbehaving server share: a bounded wait, and an HTTP/2 server
// that speaks just enough gRPC to hold or stall the client's streams while it counts them.

import http2 from "node:http2";
import type { AddressInfo } from "node:net";

/** How long a test waits for a fake server's count before it fails. */
export const limitMs = 5000;

/** p, or a rejection after ms: a promise that never settles fails the test instead of hanging it. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A gRPC server in name only, on 127.0.0.1: a subclass handles each stream (handle); it counts the
 * streams the client ended, and a test waits for its counts. */
export abstract class FakeServer {
  ended = 0;
  readonly #server = http2.createServer();
  readonly #waiters: (() => void)[] = [];

  /** Handles a stream as it opens. */
  protected abstract handle(stream: http2.ServerHttp2Stream): void;

  /** Wakes the waits after a count changed. */
  protected notify(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  /** Starts serving, and resolves to the server once it listens. */
  protected async listen(): Promise<this> {
    this.#server.on("stream", (stream) => {
      stream.on("error", () => {}); // the client's RST_STREAM(CANCEL)
      stream.on("close", () => {
        this.ended++;
        this.notify();
      });
      this.handle(stream);
    });
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return this;
  }

  get addr(): string {
    return `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Resolves once holds() is true, checked whenever a count changes (within limitMs, else rejects). */
  protected async waitUntil(holds: () => boolean, what: string): Promise<void> {
    while (!holds()) await within(new Promise<void>((r) => this.#waiters.push(r)), limitMs, what);
  }

  /** Resolves once n streams in all have ended (within limitMs, else rejects). */
  async waitEnded(n: number): Promise<void> {
    await this.waitUntil(() => this.ended >= n, `${n} streams ended`);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
