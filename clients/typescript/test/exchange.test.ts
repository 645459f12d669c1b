// An exchange round through the package's Exchange, against the real historyd binary (issue 8: "an
// exchange round (direct, broadcast, pop)"; issue 20: "the exchange"; ADR-0006 D5, DESIGN.md
// "Exchange").

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  Code,
  connect,
  DeadLetterReason,
  ErrorReason,
  genericContent,
  HistorydError,
  type HistorydClient,
  MessageRole,
  participantOf,
} from "../src/index.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";

describe("exchange", () => {
  let server: Historyd;
  let client: HistorydClient;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr, { tls: false });
  });
  after(async () => {
    client?.close();
    assert.equal(await server?.stop(), 0, "historyd exits 0 on SIGTERM");
  });

  const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
  const sent: Record<string, string> = {};

  test("register three owners (ExchangeService Register)", async () => {
    for (const owner of [a, b, c]) {
      assert.equal((await client.exchange.register(owner)).ownerId, owner);
    }
    const owners = await client.exchange.owners();
    for (const owner of [a, b, c]) assert.ok(owners.includes(owner), `${owner} is listed`);
  });

  test("send queues JSON content; nothing moves until collect (ADR-0006 D5)", async () => {
    const direct = await client.exchange.send(a, b, { text: "hi B", n: 1 }, { requestId: "ts-direct-1" });
    assert.equal(direct.role, MessageRole.UNSET, 'a base message (DESIGN.md "Exchange")');
    assert.equal(participantOf(direct.recipient), b);
    sent.direct = direct.id;

    // A repeated request id queues nothing and answers the first message (README "Exchange API").
    const again = await client.exchange.send(a, b, {}, { requestId: "ts-direct-1" });
    assert.equal(again.id, sent.direct);

    const broadcast = await client.exchange.send(a, null, "hello all");
    assert.equal(participantOf(broadcast.recipient), null, "null recipient: a broadcast");
    sent.broadcast = broadcast.id;

    assert.deepEqual(await client.exchange.receive(b), [], "not delivered before collect");
  });

  test("collect routes: direct to B, broadcast to B and C, with the owners reached when asked (ADR-0006 D5 collect)", async () => {
    const resp = await client.exchange.collect(a, { includeReachedOwnerIds: true });
    assert.equal(resp.deliveredCount, 2, "LionAGI's count: unique messages delivered");
    const reached = Object.fromEntries(resp.deliveries.map((d) => [d.messageId, [...d.reachedOwnerIds].sort()]));
    assert.deepEqual(reached, { [sent.direct!]: [b], [sent.broadcast!]: [b, c].sort() });
    assert.deepEqual(
      resp.deliveries.map((d) => d.reachedCount),
      [1, 2],
    );
  });

  test("receive peeks with JSON content out, pop takes the oldest first (ExchangeService Receive, PopMessage)", async () => {
    const peek = await client.exchange.receive(b);
    assert.deepEqual(
      peek.map((m) => m.id),
      [sent.direct, sent.broadcast],
    );
    const content = genericContent(peek[0]!);
    assert.deepEqual(content, { text: "hi B", n: 1 });
    assert.deepEqual(Object.keys(content as object), ["text", "n"], "key order kept (DESIGN.md: any-JSON fields travel as text)");
    assert.equal(genericContent(peek[1]!), "hello all");

    assert.equal((await client.exchange.pop(b, a))?.id, sent.direct);
    assert.equal((await client.exchange.pop(b, a))?.id, sent.broadcast);
    assert.equal(await client.exchange.pop(b, a), undefined, "an empty inbox pops nothing");

    assert.deepEqual(
      (await client.exchange.receive(c)).map((m) => m.id),
      [sent.broadcast],
    );
  });

  test("participants: an absent recipient is UNSET, apart from null (a broadcast) (ADR-0006 D1; DESIGN.md \"Wire model\")", async () => {
    // Absent goes out as no Value at all; the server writes UNSET back as its role name, "unset",
    // exactly as LionAGI's JSON does, and never delivers it.
    const unset = await client.exchange.send(a, undefined, 1);
    assert.equal(participantOf(unset.recipient), "unset");
    const resp = await client.exchange.collect(a);
    assert.equal(resp.deliveredCount, 0, "an UNSET recipient is undeliverable");
    const dead = await client.exchange.deadLetters(a);
    assert.equal(dead.at(-1)?.message?.id, unset.id);
    assert.equal(dead.at(-1)?.reason, DeadLetterReason.UNSET_RECIPIENT);
  });

  test('subscribeInbox pushes a message as it lands (DESIGN.md "Exchange")', async () => {
    const abort = new AbortController();
    let live!: () => void;
    const subscribed = new Promise<void>((resolve) => (live = resolve));
    const inbox = client.exchange.subscribeInbox(c, { signal: abort.signal, onHeartbeat: () => live() })[Symbol.asyncIterator]();
    const first = inbox.next();
    await subscribed; // the first frame is a heartbeat: the subscription is live

    const sentLive = await client.exchange.send(b, c, { live: true });
    await client.exchange.collect(b);
    const pushed = await first;
    assert.ok(!pushed.done);
    assert.equal(pushed.value.id, sentLive.id);
    assert.deepEqual(genericContent(pushed.value), { live: true });
    abort.abort();
    assert.deepEqual(await inbox.next(), { done: true, value: undefined }, "the signal ends the iteration without an error");
  });

  // The rule (exchange.ts): the signal ends the subscription, one aborted before the call too, as
  // the watch's does. A listener added to a signal already aborted never fires: the subscription
  // was made and ran until the client closed.
  test("subscribeInbox with a signal aborted already ends at once, subscribing nothing", async () => {
    let heartbeats = 0;
    const inbox = client.exchange.subscribeInbox(c, { signal: AbortSignal.abort(), onHeartbeat: () => heartbeats++ })[Symbol.asyncIterator]();
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`still open after 5 s, ${heartbeats} heartbeats`)), 5000)));
    try {
      assert.deepEqual(await Promise.race([inbox.next(), limit]), { done: true, value: undefined });
    } finally {
      clearTimeout(timer);
    }
    assert.equal(heartbeats, 0, "no subscription was made");
  });

  test("an unknown recipient becomes a dead letter, and unregister returns what was held", async () => {
    await client.exchange.send(a, randomUUID(), 1);
    await client.exchange.collect(a);
    const dead = await client.exchange.deadLetters(a);
    assert.equal(dead.at(-1)?.reason, DeadLetterReason.UNKNOWN_RECIPIENT);

    const left = await client.exchange.unregister(c);
    assert.equal(left.ownerId, c);
    assert.equal(
      left.inboxes.reduce((n, box) => n + box.messages.length, 0),
      2,
      "the broadcast and the live message",
    );
    assert.equal(left.inboxes[0]!.messages[0]!.metadata?.lion_class, "lionagi.protocols.messages.message.Message");
    await assert.rejects(client.exchange.collect(c), (err: unknown) => {
      assert.ok(err instanceof HistorydError);
      assert.equal(err.code, Code.FailedPrecondition, "error_reason.proto: OWNER_NOT_REGISTERED is FAILED_PRECONDITION");
      assert.equal(err.reason, ErrorReason.OWNER_NOT_REGISTERED);
      return true;
    });
  });
});
