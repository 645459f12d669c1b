// A message whose rendering is not text (an Instruction whose plain_content is a JSON object, an
// AssistantResponse whose value is not a string) is projected with content_json; toChatMessages
// gives that value parsed as the content, as it gives text as text (review F5).

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { type HistorydClient, type JsonObject } from "../src/index.js";
import { serveSuite } from "./helpers/server.js";

const message = (id: string, lionClass: string, role: string, content: JsonObject): JsonObject => ({
  id,
  created_at: 1700000000.5,
  metadata: { lion_class: `lionagi.protocols.messages.${lionClass}` },
  content,
  embedding: null,
  sender: null,
  recipient: null,
  channel: null,
  role,
});

describe("toChatMessages of JSON renderings", () => {
  let client: HistorydClient;
  serveSuite((_, c) => (client = c));

  test("content_json is the content, parsed", async () => {
    const branch = await client.importBranch(
      [
        message("00000000-0000-4000-8000-0000000000a1", "instruction.Instruction", "user", { plain_content: { a: 1.5 } }),
        message("00000000-0000-4000-8000-0000000000a2", "assistant_response.AssistantResponse", "assistant", {
          assistant_response: [1, "b"],
        }),
      ],
      { newId: true },
    );
    const chat = await branch.toChatMessages();
    assert.deepEqual(
      chat.map((m) => ({ role: m.role, content: m.content, renderError: m.renderError })),
      [
        { role: "user", content: { a: 1.5 }, renderError: undefined },
        { role: "assistant", content: [1, "b"], renderError: undefined },
      ],
    );
  });
});
