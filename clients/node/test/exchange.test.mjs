// An exchange round over ExchangeService from Node.js, against the real historyd binary (issue 8:
// "an exchange round (direct, broadcast, pop)"; ADR-0006 D5, DESIGN.md "Exchange").

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';

import { connect, nullValue, str, toJSON, valueText } from '../lib/historyd.mjs';
import { startHistoryd } from '../lib/server.mjs';

describe('exchange', () => {
  let server;
  let client;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr);
  });
  after(async () => {
    client?.close();
    const code = await server?.stop();
    assert.equal(code, 0, 'historyd exits 0 on SIGTERM');
  });

  const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
  const sent = {};

  test('Register three owners (ExchangeService Register)', async () => {
    for (const owner of [a, b, c]) {
      const resp = await client.exchange.Register({ owner_id: owner });
      assert.equal(resp.flow.owner_id, owner);
    }
    const owners = await client.exchange.ListOwners({});
    for (const owner of [a, b, c]) {
      assert.ok(owners.owners.some((o) => o.owner_id === owner), `${owner} is listed`);
    }
  });

  test('Send queues; nothing moves until Collect (ADR-0006 D5)', async () => {
    const direct = await client.exchange.Send({
      sender: a,
      recipient: str(b),
      content_json: '{"text": "hi B", "n": 1}',
      request_id: 'node-direct-1',
    });
    assert.equal(direct.message.role, 'MESSAGE_ROLE_UNSET', 'a base message (DESIGN.md "Exchange")');
    assert.equal(valueText(direct.message.recipient), b);
    sent.direct = direct.message.id;

    // A repeated request_id queues nothing and answers the first message (README "Exchange API").
    const again = await client.exchange.Send({ sender: a, recipient: str(b), content_json: '{}', request_id: 'node-direct-1' });
    assert.equal(again.message.id, sent.direct);

    const broadcast = await client.exchange.Send({ sender: a, recipient: nullValue(), content_json: '"hello all"' });
    assert.equal(broadcast.message.recipient.kind, 'nullValue', 'null recipient: a broadcast');
    sent.broadcast = broadcast.message.id;

    const before = await client.exchange.Receive({ owner_id: b });
    assert.deepEqual(before.messages ?? [], [], 'not delivered before Collect');
  });

  test('Collect routes: direct to B, broadcast to B and C, with the owners reached when asked (ADR-0006 D5 collect)', async () => {
    const resp = await client.exchange.Collect({ owner_id: a, include_reached_owner_ids: true });
    assert.equal(resp.delivered_count, 2, "LionAGI's count: unique messages delivered");
    const reached = Object.fromEntries(resp.deliveries.map((d) => [d.message_id, [...d.reached_owner_ids].sort()]));
    assert.deepEqual(reached, { [sent.direct]: [b], [sent.broadcast]: [b, c].sort() });
    assert.deepEqual(resp.deliveries.map((d) => d.reached_count), [1, 2]);
  });

  test('Receive peeks, PopMessage takes the oldest first (ExchangeService Receive, PopMessage)', async () => {
    const peek = await client.exchange.Receive({ owner_id: b });
    assert.deepEqual(peek.messages.map((m) => m.id), [sent.direct, sent.broadcast]);
    const content = JSON.parse(peek.messages[0].generic.content_json);
    assert.deepEqual(content, { text: 'hi B', n: 1 });
    assert.deepEqual(Object.keys(content), ['text', 'n'], 'key order kept (DESIGN.md: any-JSON fields travel as text)');

    const first = await client.exchange.PopMessage({ owner_id: b, sender: a });
    assert.equal(first.message.id, sent.direct);
    const second = await client.exchange.PopMessage({ owner_id: b, sender: a });
    assert.equal(second.message.id, sent.broadcast);
    const third = await client.exchange.PopMessage({ owner_id: b, sender: a });
    assert.equal(third.message, undefined, 'an empty inbox pops nothing');

    const atC = await client.exchange.Receive({ owner_id: c });
    assert.deepEqual(atC.messages.map((m) => m.id), [sent.broadcast]);
  });

  test('SubscribeInbox pushes a message as it lands (DESIGN.md "Exchange")', async () => {
    const stream = client.exchange.SubscribeInbox({ owner_id: c });
    const frames = [];
    let wake;
    stream.on('data', (f) => {
      frames.push(f);
      wake?.();
    });
    const errored = once(stream, 'error').catch(() => {});
    const next = async () => {
      while (frames.length === 0) await new Promise((resolve) => (wake = resolve));
      return frames.shift();
    };
    const hello = await next();
    assert.equal(hello.event, 'heartbeat', 'the first frame is a heartbeat: the subscription is live');

    const live = await client.exchange.Send({ sender: b, recipient: str(c), content_json: '{"live": true}' });
    await client.exchange.Collect({ owner_id: b });
    const pushed = await next();
    assert.equal(pushed.event, 'message');
    assert.equal(pushed.message.id, live.message.id);
    assert.deepEqual(JSON.parse(pushed.message.generic.content_json), { live: true });
    stream.cancel();
    await errored; // grpc-js ends a cancelled call with a CANCELLED error event
  });

  test('an unknown recipient becomes a dead letter, and Unregister returns what was held', async () => {
    await client.exchange.Send({ sender: a, recipient: str(randomUUID()), content_json: '1' });
    await client.exchange.Collect({ owner_id: a });
    const dead = await client.exchange.ListDeadLetters({ owner_id: a });
    assert.equal(dead.dead_letters.length, 1);
    assert.equal(dead.dead_letters[0].reason, 'DEAD_LETTER_REASON_UNKNOWN_RECIPIENT');

    const left = await client.exchange.Unregister({ owner_id: c });
    assert.equal(left.flow.owner_id, c);
    assert.equal(left.flow.inboxes.reduce((n, box) => n + box.messages.length, 0), 2, 'the broadcast and the live message');
    await assert.rejects(client.exchange.Collect({ owner_id: c }), (err) => {
      assert.equal(err.errorInfo?.reason, 'ERROR_REASON_OWNER_NOT_REGISTERED');
      return true;
    });
    assert.equal(toJSON(left.flow.inboxes[0].messages[0].metadata).lion_class, 'lionagi.protocols.messages.message.Message');
  });
});
