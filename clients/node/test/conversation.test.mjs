// A whole conversation over HistoryService from Node.js, against the real historyd binary (issue 8:
// "branch, system, instruction, assistant response, action pair, views, ToChatMessages"). The
// rendered prompt texts are checked byte for byte: they are what a model sees, and they must be
// LionAGI's (vectors/README.md: "compare rendered text and chat_msg.content byte for byte").

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import { connect, str, toJSON, valueText } from '../lib/historyd.mjs';
import { startHistoryd } from '../lib/server.mjs';
import { locateVectors, vectorRecord } from '../lib/vectors.mjs';

// The prompt texts LionAGI 0.27.0 renders for these inputs, each from the vector record named
// beside it (group chat_msg); the last test checks these constants against the records.
const systemText = "You are a helpful AI assistant. Let's think step by step."; // System default
const instructionText = 'Guidance: Short\nInstruction: Summarize\nContext:\n- a: 1\n  b:\n  - 1\n  - 2\n- txt'; // Instruction guidance+instruction+context
const assistantText = 'The answer is 42.'; // AssistantResponse
const actionResponseText = 'Function: search\nArguments:\n  q: lion\nOutput:\n  hits:\n  - a\n  - b\n  n: 2'; // ActionResponse dict output
// An ActionRequest renders the function and arguments part of its response (ActionRequest record:
// "Function: search\nArguments:\n  q: lion\n  k: 3\n  deep: false" for three arguments).
const actionRequestText = 'Function: search\nArguments:\n  q: lion';

// A raw OpenAI chat completion, as a provider returns it: from_response takes the text from
// choices[].message.content (parse_assistant_response record "openai chat") and keeps the raw value
// in metadata.model_response (ADR-0006 D2).
const rawResponse = {
  id: 'chatcmpl-7',
  object: 'chat.completion',
  model: 'gpt-4o-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: assistantText }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 31, completion_tokens: 6, total_tokens: 37 },
};

describe('conversation', () => {
  let server;
  let client;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr);
  });
  after(async () => {
    client?.close();
    const code = await server?.stop();
    assert.equal(code, 0, 'historyd exits 0 on SIGTERM (README "Configuration": shutdown)');
  });

  const ids = {};
  let branchId;

  test('CreateBranch with a system: the System is at index 0, sender the user (CreateBranch doc)', async () => {
    const resp = await client.history.CreateBranch({
      user: 'alice',
      name: 'node-demo',
      system: { system_message: systemText },
      request_id: randomUUID(),
    });
    branchId = resp.branch.id;
    assert.match(branchId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(resp.branch.user, 'alice');
    assert.equal(resp.branch.head_sequence, '1', 'BRANCH_CREATED is sequence 1 (DESIGN.md "Sequences")');
    assert.equal(resp.system.role, 'MESSAGE_ROLE_SYSTEM');
    assert.equal(valueText(resp.system.sender), 'alice');
    assert.equal(resp.system.rendered.text, systemText);
    assert.equal(toJSON(resp.system.metadata).lion_class, 'lionagi.protocols.messages.system.System');
    ids.system = resp.system.id;
  });

  test('AddMessage instruction with guidance and JSON context (ADR-0006 D3 add_message)', async () => {
    const resp = await client.history.AddMessage({
      branch_id: branchId,
      include_rendered: true, // a write renders only when asked (AddMessageRequest.include_rendered)
      sender: str('alice'),
      recipient: str('assistant'),
      instruction: {
        instruction: 'Summarize',
        guidance: 'Short',
        // any-JSON fields travel as JSON text (DESIGN.md "Wire model"); key order reaches the prompt
        context_json: ['{"a": 1, "b": [1, 2]}', '"txt"'],
      },
    });
    assert.equal(resp.index, '1');
    assert.equal(resp.message.role, 'MESSAGE_ROLE_USER');
    assert.equal(valueText(resp.message.recipient), 'assistant');
    assert.equal(resp.message.rendered.text, instructionText);
    ids.instruction = resp.message.id;
  });

  test('AddMessage assistant response from a raw provider response (ADR-0006 D2 from_response)', async () => {
    const resp = await client.history.AddMessage({
      branch_id: branchId,
      include_rendered: true,
      assistant_response: { raw_response_json: JSON.stringify(rawResponse) },
    });
    assert.equal(resp.message.role, 'MESSAGE_ROLE_ASSISTANT');
    assert.equal(resp.message.assistant_response.assistant_response, assistantText);
    assert.equal(resp.message.rendered.text, assistantText);
    assert.deepEqual(toJSON(resp.message.metadata).model_response, rawResponse, 'the raw value is kept');
    ids.assistant = resp.message.id;
  });

  test('an action pair: AddMessage action_request, then CreateActionResponse (ADR-0006 D2 correlation)', async () => {
    const req = await client.history.AddMessage({
      branch_id: branchId,
      include_rendered: true,
      action_request: { function: 'search', arguments_json: '{"q": "lion"}' },
    });
    assert.equal(req.message.role, 'MESSAGE_ROLE_ACTION');
    assert.equal(req.message.rendered.text, actionRequestText);
    ids.request = req.message.id;

    const requestId = randomUUID();
    const call = {
      branch_id: branchId,
      action_request_id: ids.request,
      output_json: '{"hits": ["a", "b"], "n": 2}',
      request_id: requestId,
      include_rendered: true,
    };
    const resp = await client.history.CreateActionResponse(call);
    ids.response = resp.action_response.id;
    assert.equal(resp.action_response.action_response.action_request_id, ids.request);
    assert.equal(resp.action_request.action_request.action_response_id, ids.response);
    assert.equal(resp.action_response.rendered.text, actionResponseText);
    assert.equal(resp.head_sequence, String(Number(req.head_sequence) + 2), 'two events (CreateActionResponse doc)');

    // The same request_id again returns the first response and writes nothing (AIP-155, README).
    const again = await client.history.CreateActionResponse(call);
    assert.equal(again.action_response.id, ids.response);
    assert.equal(again.head_sequence, resp.head_sequence);
  });

  test('ListMessages: the whole branch in order, then the typed views (ADR-0006 D3 "Typed views")', async () => {
    const all = await client.history.ListMessages({ branch_id: branchId });
    assert.deepEqual(
      all.messages.map((m) => m.id),
      [ids.system, ids.instruction, ids.assistant, ids.request, ids.response],
    );
    assert.equal(all.next_page_token ?? '', '', 'one page holds it all');

    const view = async (v) => (await client.history.ListMessages({ branch_id: branchId, view: v })).messages?.map((m) => m.id) ?? [];
    assert.deepEqual(await view('MESSAGE_VIEW_INSTRUCTIONS'), [ids.instruction]);
    assert.deepEqual(await view('MESSAGE_VIEW_ASSISTANT_RESPONSES'), [ids.assistant]);
    assert.deepEqual(await view('MESSAGE_VIEW_ACTIONS'), [ids.request, ids.response]);
    assert.deepEqual(await view('MESSAGE_VIEW_ACTION_REQUESTS'), [ids.request]);
    assert.deepEqual(await view('MESSAGE_VIEW_ACTION_RESPONSES'), [ids.response]);

    const last = await client.history.GetLastMessage({ branch_id: branchId, view: 'MESSAGE_VIEW_INSTRUCTIONS' });
    assert.equal(last.message.id, ids.instruction, 'last_instruction');

    // Paging: two at a time, newest first, with the opaque token.
    const first = await client.history.ListMessages({ branch_id: branchId, page_size: 2, descending: true });
    assert.deepEqual(first.messages.map((m) => m.id), [ids.response, ids.request]);
    const second = await client.history.ListMessages({
      branch_id: branchId,
      page_size: 2,
      descending: true,
      page_token: first.next_page_token,
    });
    assert.deepEqual(second.messages.map((m) => m.id), [ids.assistant, ids.instruction]);
  });

  test('ToChatMessages: the prompt, byte for byte (ADR-0006 D3 "Raw projection")', async () => {
    const chat = await client.history.ToChatMessages({ branch_id: branchId });
    assert.deepEqual(
      chat.messages.map((m) => ({ role: m.role, content: m.text })),
      [
        { role: 'system', content: systemText },
        { role: 'user', content: instructionText },
        { role: 'assistant', content: assistantText },
        { role: 'action', content: actionRequestText },
        { role: 'action', content: actionResponseText },
      ],
    );
    assert.deepEqual(chat.message_ids, [ids.system, ids.instruction, ids.assistant, ids.request, ids.response]);

    // A supplied order is projected as given; present and empty gives none (DESIGN.md "Wire model").
    const ordered = await client.history.ToChatMessages({ branch_id: branchId, order: { ids: [ids.assistant, ids.instruction] } });
    assert.deepEqual(ordered.messages.map((m) => m.text), [assistantText, instructionText]);
    const none = await client.history.ToChatMessages({ branch_id: branchId, order: { ids: [] } });
    assert.deepEqual(none.messages ?? [], []);
  });

  test('ExportBranch: LionAGI JSON with the five messages (DESIGN.md "Branches")', async () => {
    const resp = await client.history.ExportBranch({ branch_id: branchId, mode: 'SERIALIZATION_MODE_JSON' });
    const data = JSON.parse(resp.data);
    assert.equal(data.id, branchId);
    assert.equal(data.metadata.lion_class, 'lionagi.session.branch.Branch');
    assert.deepEqual(data.messages.progression.order, [ids.system, ids.instruction, ids.assistant, ids.request, ids.response]);
  });

  test('errors carry an ErrorInfo with a reason to switch on (DESIGN.md "Errors")', async () => {
    const missing = randomUUID();
    await assert.rejects(client.history.GetMessage({ branch_id: branchId, message_id: missing }), (err) => {
      assert.equal(err.code, 5, 'NOT_FOUND');
      assert.deepEqual(err.errorInfo, {
        reason: 'ERROR_REASON_MESSAGE_NOT_FOUND',
        domain: 'historyd',
        metadata: { branchId, messageId: missing },
      });
      return true;
    });
  });

  test('the expected prompt texts are the LionAGI records', () => {
    const { file, looked } = locateVectors();
    // The records are the repository's own test data (issue 12): missing means a broken checkout.
    assert.ok(file, `LionAGI vectors not found; looked in ${looked.join(', ')}`);
    const chat = (name) => vectorRecord(file, 'chat_msg', name).output.chat_msg.content;
    assert.equal(systemText, chat('System default'));
    assert.equal(instructionText, chat('Instruction guidance+instruction+context'));
    assert.equal(assistantText, chat('AssistantResponse'));
    assert.equal(actionResponseText, chat('ActionResponse dict output'));
    assert.ok(actionResponseText.startsWith(`${actionRequestText}\nOutput:`));
    assert.ok(chat('ActionRequest').startsWith('Function: search\nArguments:\n  q: lion\n'));
    const parsed = vectorRecord(file, 'parse_assistant_response', 'openai chat');
    assert.deepEqual(parsed.output[0], 'XY', 'from_response joins choices[].message.content');
  });
});
