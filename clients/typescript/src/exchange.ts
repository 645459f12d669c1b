// The Exchange (ADR-0006 D5, DESIGN.md "Exchange"): owners register, send base messages whose
// content is any JSON value, and collect to route them into the recipients' inboxes.

import type { HistorydClient } from "./client.js";
import type { Message } from "./gen/historyd/v1/envelope_pb.js";
import type { CollectResponse, DeadLetter, Flow } from "./gen/historyd/v1/exchange_service_pb.js";
import { type JsonValue, type Participant, jsonText, participantValue } from "./json.js";
import type { CallOptions } from "./branch.js";

/** The Exchange's calls. Register, Unregister, Collect, CollectAll and PopMessage are never
 * retried (a retry after a lost answer would pop or report twice); Send is, with its request id. */
export class Exchange {
  constructor(readonly client: HistorydClient) {}

  /** Registers an owner (a UUID); returns its flow. */
  async register(ownerId: string, options: CallOptions = {}): Promise<Flow> {
    const resp = await this.client.exchangeService.register({ ownerId }, this.client.callOptions(options.signal));
    return resp.flow!;
  }

  /** Unregisters an owner; returns what it held. */
  async unregister(ownerId: string, options: CallOptions & { omitDeadLetters?: boolean } = {}): Promise<Flow> {
    const resp = await this.client.exchangeService.unregister(
      { ownerId, omitDeadLetters: options.omitDeadLetters ?? false },
      this.client.callOptions(options.signal),
    );
    return resp.flow!;
  }

  /** The registered owners' ids, every page. */
  async owners(options: CallOptions = {}): Promise<string[]> {
    const out: string[] = [];
    let pageToken = "";
    do {
      const page = await this.client.exchangeService.listOwners({ pageToken }, this.client.callOptions(options.signal));
      out.push(...page.owners.map((o) => o.ownerId));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return out;
  }

  /** Queues a message from `sender` to `recipient` (a string, or null for a broadcast) with any JSON
   * `content`; nothing moves until the sender collects. */
  async send(
    sender: string,
    recipient: Participant,
    content: JsonValue | undefined,
    options: CallOptions & { channel?: string; requestId?: string } = {},
  ): Promise<Message> {
    const resp = await this.client.exchangeService.send(
      {
        sender,
        recipient: participantValue(recipient),
        contentJson: content === undefined ? undefined : jsonText(content),
        channel: options.channel,
        requestId: options.requestId ?? "",
      },
      this.client.callOptions(options.signal),
    );
    return resp.message!;
  }

  /** Routes the owner's outbox into the recipients' inboxes. */
  async collect(ownerId: string, options: CallOptions & { includeReachedOwnerIds?: boolean } = {}): Promise<CollectResponse> {
    return this.client.exchangeService.collect(
      { ownerId, includeReachedOwnerIds: options.includeReachedOwnerIds ?? false },
      this.client.callOptions(options.signal),
    );
  }

  /** Collects every owner's outbox; returns the number of messages delivered. */
  async collectAll(options: CallOptions = {}): Promise<number> {
    const resp = await this.client.exchangeService.collectAll({}, this.client.callOptions(options.signal));
    return resp.deliveredCount;
  }

  /** The owner's inbox, oldest first, without taking anything (every page; `sender` filters). */
  async receive(ownerId: string, options: CallOptions & { sender?: string } = {}): Promise<Message[]> {
    const out: Message[] = [];
    let pageToken = "";
    do {
      const page = await this.client.exchangeService.receive(
        { ownerId, sender: options.sender, pageToken },
        this.client.callOptions(options.signal),
      );
      out.push(...page.messages);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return out;
  }

  /** Takes the oldest message from `sender` out of the owner's inbox; undefined when there is none. */
  async pop(ownerId: string, sender: string, options: CallOptions = {}): Promise<Message | undefined> {
    const resp = await this.client.exchangeService.popMessage({ ownerId, sender }, this.client.callOptions(options.signal));
    return resp.message;
  }

  /** The owner's dead letters (every page). */
  async deadLetters(ownerId: string, options: CallOptions = {}): Promise<DeadLetter[]> {
    const out: DeadLetter[] = [];
    let pageToken = "";
    do {
      const page = await this.client.exchangeService.listDeadLetters({ ownerId, pageToken }, this.client.callOptions(options.signal));
      out.push(...page.deadLetters);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return out;
  }

  /**
   * The messages landing in the owner's inbox, live, as an async iterable; heartbeats are passed
   * over (`onHeartbeat` sees them: the first one says the subscription is live). It ends with the
   * signal (at once, subscribing nothing, when it is aborted already) or a `break`.
   */
  async *subscribeInbox(
    ownerId: string,
    options: CallOptions & { sender?: string; onHeartbeat?: () => void } = {},
  ): AsyncIterable<Message> {
    const abort = new AbortController();
    const onAbort = () => abort.abort();
    // A signal aborted already fires no listener: checked first, or the subscription ran on.
    if (options.signal?.aborted) return;
    options.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const stream = this.client.exchangeService.subscribeInbox({ ownerId, sender: options.sender }, { signal: abort.signal });
      for await (const frame of stream) {
        if (frame.event.case === "message") yield frame.event.value;
        else if (frame.event.case === "heartbeat") options.onHeartbeat?.();
      }
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      abort.abort();
    }
  }
}
