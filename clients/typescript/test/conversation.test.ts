// A whole conversation over HistoryService through the package, against the real historyd binary
// (issue 8: "branch, system, instruction, assistant response, action pair, views, ToChatMessages";
// issue 20: "the conversation"). The rendered prompt texts are checked byte for byte: they are what
// a model sees, and they must be LionAGI's (vectors/README.md: "compare rendered text and
// chat_msg.content byte for byte").

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import {
  connect,
  type Branch,
  type HistorydClient,
  MessageRole,
  MessageView,
  SerializationMode,
  VERSION,
  participantOf,
} from "../src/index.js";
import { packageDir } from "./helpers/repo.js";
import { startHistoryd, type Historyd } from "./helpers/server.js";
import { locateVectors, vectorRecord } from "./helpers/vectors.js";

// The prompt texts LionAGI 0.27.0 renders for these inputs, each from the vector record named
// beside it (group chat_msg); the last test checks these constants against the records.
const systemText = "You are a helpful AI assistant. Let's think step by step."; // System default
const instructionText = "Guidance: Short\nInstruction: Summarize\nContext:\n- a: 1\n  b:\n  - 1\n  - 2\n- txt"; // Instruction guidance+instruction+context
const assistantText = "The answer is 42."; // AssistantResponse
const actionResponseText = "Function: search\nArguments:\n  q: lion\nOutput:\n  hits:\n  - a\n  - b\n  n: 2"; // ActionResponse dict output
// An ActionRequest renders the function and arguments part of its response (ActionRequest record:
// "Function: search\nArguments:\n  q: lion\n  k: 3\n  deep: false" for three arguments).
const actionRequestText = "Function: search\nArguments:\n  q: lion";

// A raw OpenAI chat completion, as a provider returns it: from_response takes the text from
// choices[].message.content (parse_assistant_response record "openai chat") and keeps the raw value
// in metadata.model_response (ADR-0006 D2).
const rawResponse = {
  id: "chatcmpl-7",
  object: "chat.completion",
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: assistantText }, finish_reason: "stop" }],
  usage: { prompt_tokens: 31, completion_tokens: 6, total_tokens: 37 },
};

describe("conversation", () => {
  let server: Historyd;
  let client: HistorydClient;
  before(async () => {
    server = await startHistoryd();
    client = connect(server.addr, { tls: false });
  });
  after(async () => {
    client?.close();
    assert.equal(await server?.stop(), 0, 'historyd exits 0 on SIGTERM (README "Configuration": shutdown)');
  });

  const ids: Record<string, string> = {};
  let branch: Branch;

  test("the package has a version, the same in package.json (issue 20: a version)", () => {
    const pkg = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8")) as { version: string };
    assert.match(VERSION, /^\d+\.\d+\.\d+/);
    assert.equal(VERSION, pkg.version);
  });

  test("createBranch with a system: the System is at index 0, sender the user (CreateBranch doc)", async () => {
    branch = await client.createBranch({ user: "alice", name: "ts-demo", system: systemText });
    assert.match(branch.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(branch.info?.user, "alice");
    assert.equal(branch.info?.headSequence, 1n, 'BRANCH_CREATED is sequence 1 (DESIGN.md "Sequences")');
    const system = await branch.get((await branch.last())!.id);
    assert.equal(system.role, MessageRole.SYSTEM);
    assert.equal(participantOf(system.sender), "alice");
    // Typed oneofs: the content's case names the kind and its value is that kind's message.
    assert.equal(system.content.case, "system");
    assert.equal(system.rendered?.value.case, "text");
    assert.equal(system.rendered?.value.value, systemText);
    assert.equal(system.metadata?.lion_class, "lionagi.protocols.messages.system.System", "metadata is a JSON object");
    ids.system = system.id;
  });

  test("addInstruction with guidance and JSON context values (ADR-0006 D3 add_message)", async () => {
    const m = await branch.addInstruction("Summarize", {
      guidance: "Short",
      // JSON values in: the client writes the JSON text (DESIGN.md "Wire model"); key order reaches the prompt.
      context: [{ a: 1, b: [1, 2] }, "txt"],
      sender: "alice",
      recipient: "assistant",
      includeRendered: true,
    });
    assert.equal(m.role, MessageRole.USER);
    assert.equal(participantOf(m.recipient), "assistant");
    assert.equal(m.rendered?.value.value, instructionText);
    assert.equal(m.content.case, "instruction");
    if (m.content.case === "instruction") assert.deepEqual(m.content.value.promptContextJson.map((t) => JSON.parse(t)), [{ a: 1, b: [1, 2] }, "txt"]);
    ids.instruction = m.id;
  });

  test("participants: a string, null (explicit None) and absent go in and come out as such (ADR-0006 D1)", async () => {
    const other = await client.createBranch();
    const named = await other.addInstruction("x", { sender: "user", recipient: "assistant" });
    const withNull = await other.addInstruction("y", { sender: null, recipient: null });
    // add_message's factory reads an absent sender or recipient as None (AddMessageRequest.sender),
    // so the server stores null for both; the Exchange test shows absent staying absent (UNSET).
    const absent = await other.addInstruction("z");
    assert.equal(participantOf(named.sender), "user");
    assert.equal(participantOf(named.recipient), "assistant");
    assert.equal(participantOf(withNull.recipient), null);
    assert.equal(participantOf(absent.recipient), null);
    const exported = await other.export();
    const msgs = (exported.messages as { collections: { recipient: unknown }[] }).collections;
    assert.deepEqual(
      msgs.map((m) => m.recipient),
      ["assistant", null, null],
    );
    await other.delete();
  });

  test("addAssistantResponse from a raw provider response (ADR-0006 D2 from_response)", async () => {
    const m = await branch.addAssistantResponse({ raw: rawResponse }, { includeRendered: true });
    assert.equal(m.role, MessageRole.ASSISTANT);
    assert.ok(m.content.case === "assistantResponse");
    assert.equal(m.content.value.assistantResponse, assistantText);
    assert.equal(m.rendered?.value.value, assistantText);
    assert.deepEqual(m.metadata?.model_response, rawResponse, "the raw value is kept, a JSON value out");
    ids.assistant = m.id;
  });

  test("an action pair: addActionRequest, then respond with a JSON output (ADR-0006 D2 correlation)", async () => {
    const req = await branch.addActionRequest("search", { q: "lion" }, { includeRendered: true });
    assert.equal(req.role, MessageRole.ACTION);
    assert.equal(req.rendered?.value.value, actionRequestText);
    ids.request = req.id;

    const requestId = randomUUID();
    const resp = await branch.respond(req, { hits: ["a", "b"], n: 2 }, { requestId, includeRendered: true });
    ids.response = resp.id;
    assert.ok(resp.content.case === "actionResponse");
    assert.equal(resp.content.value.actionRequestId, ids.request);
    assert.equal(resp.rendered?.value.value, actionResponseText);
    const answered = await branch.get(ids.request);
    assert.ok(answered.content.case === "actionRequest");
    assert.equal(answered.content.value.actionResponseId, ids.response);

    // The same request id again returns the first response and writes nothing (AIP-155, README).
    const head = (await branch.describe()).headSequence;
    const again = await branch.respond(req, { hits: [], n: 0 }, { requestId });
    assert.equal(again.id, ids.response);
    assert.equal((await branch.describe()).headSequence, head);
  });

  test("messages(): the whole branch in order over pages, then the typed views (ADR-0006 D3 \"Typed views\")", async () => {
    const collect = async (it: AsyncIterable<{ id: string }>) => {
      const out: string[] = [];
      for await (const m of it) out.push(m.id);
      return out;
    };
    const order = [ids.system, ids.instruction, ids.assistant, ids.request, ids.response];
    assert.deepEqual(await collect(branch.messages()), order);
    assert.deepEqual(await collect(branch.messages({ pageSize: 2 })), order, "three pages of at most two");
    assert.deepEqual(await collect(branch.messages({ pageSize: 2, descending: true })), [...order].reverse());
    assert.deepEqual(await collect(branch.messages({ view: MessageView.INSTRUCTIONS })), [ids.instruction]);
    assert.deepEqual(await collect(branch.messages({ view: MessageView.ASSISTANT_RESPONSES })), [ids.assistant]);
    assert.deepEqual(await collect(branch.messages({ view: MessageView.ACTIONS })), [ids.request, ids.response]);
    assert.deepEqual(await collect(branch.messages({ view: MessageView.ACTION_REQUESTS })), [ids.request]);
    assert.deepEqual(await collect(branch.messages({ view: MessageView.ACTION_RESPONSES })), [ids.response]);
    assert.equal((await branch.last(MessageView.INSTRUCTIONS))?.id, ids.instruction, "last_instruction");
  });

  test('toChatMessages: the prompt, byte for byte (ADR-0006 D3 "Raw projection")', async () => {
    const chat = await branch.toChatMessages();
    assert.deepEqual(
      chat.map((m) => ({ role: m.role, content: m.content })),
      [
        { role: "system", content: systemText },
        { role: "user", content: instructionText },
        { role: "assistant", content: assistantText },
        { role: "action", content: actionRequestText },
        { role: "action", content: actionResponseText },
      ],
    );
    assert.deepEqual(
      chat.map((m) => m.id),
      [ids.system, ids.instruction, ids.assistant, ids.request, ids.response],
    );
    // A supplied order is projected as given; present and empty gives none (DESIGN.md "Wire model").
    const ordered = await branch.toChatMessages({ order: [ids.assistant!, ids.instruction!] });
    assert.deepEqual(
      ordered.map((m) => m.content),
      [assistantText, instructionText],
    );
    assert.deepEqual(await branch.toChatMessages({ order: [] }), []);
  });

  test('export: LionAGI JSON as a value, and importBranch takes it back (DESIGN.md "Branches")', async () => {
    const data = await branch.export({ mode: SerializationMode.JSON });
    assert.equal(data.id, branch.id);
    assert.equal((data.metadata as { lion_class: string }).lion_class, "lionagi.session.branch.Branch");
    const progression = (data.messages as { progression: { order: string[] } }).progression.order;
    assert.deepEqual(progression, [ids.system, ids.instruction, ids.assistant, ids.request, ids.response]);

    const copy = await client.importBranch(data, { newId: true });
    assert.notEqual(copy.id, branch.id);
    assert.deepEqual(
      (await copy.toChatMessages()).map((m) => m.content),
      (await branch.toChatMessages()).map((m) => m.content),
    );
    const fromText = await client.importBranch(JSON.stringify(data), { newId: true });
    assert.equal(((await fromText.export()).messages as { progression: { order: string[] } }).progression.order.length, 5);
  });

  test("the expected prompt texts are the LionAGI records", () => {
    const { file, looked } = locateVectors();
    // The records are the repository's own test data (issue 12): missing means a broken checkout.
    assert.ok(file, `LionAGI vectors not found; looked in ${looked.join(", ")}`);
    const chat = (name: string) => vectorRecord(file, "chat_msg", name).output.chat_msg.content as string;
    assert.equal(systemText, chat("System default"));
    assert.equal(instructionText, chat("Instruction guidance+instruction+context"));
    assert.equal(assistantText, chat("AssistantResponse"));
    assert.equal(actionResponseText, chat("ActionResponse dict output"));
    assert.ok(actionResponseText.startsWith(`${actionRequestText}\nOutput:`));
    assert.ok(chat("ActionRequest").startsWith("Function: search\nArguments:\n  q: lion\n"));
    const parsed = vectorRecord(file, "parse_assistant_response", "openai chat");
    assert.deepEqual(parsed.output[0], "XY", "from_response joins choices[].message.content");
  });
});
