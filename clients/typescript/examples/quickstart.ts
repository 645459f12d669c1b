import { randomUUID } from "node:crypto";

import { connect, ErrorReason, EventKind, genericContent, HistorydError, MessageView } from "@historyd/client";

// `make run` serves plaintext on 127.0.0.1:50051; pass `token` and `tls` for a secured server.
const client = connect(process.env.HISTORYD_ADDR ?? "127.0.0.1:50051", { tls: false });

// A conversation: a branch with a system message, an instruction with JSON context, an assistant
// response from a raw provider response, and a tool call with its result.
const branch = await client.createBranch({ user: "alice", name: "demo", system: "You are a careful calculator." });
await branch.addInstruction("What is 30 + 12?", { context: { a: 30, b: 12 }, sender: "alice", recipient: "assistant" });
await branch.addAssistantResponse({
  raw: { object: "chat.completion", choices: [{ message: { role: "assistant", content: "I will call add." } }] },
});
const call = await branch.addActionRequest("add", { a: 30, b: 12 });
await branch.respond(call, { sum: 42 });

// A watch that replays the branch from its start and keeps going live, across reconnects.
const watch = branch.watch({ after: 0n });

for await (const m of branch.messages({ view: MessageView.ACTIONS })) {
  console.log("action:", m.content.case); // typed oneofs: "actionRequest", then "actionResponse"
}
for (const m of await branch.toChatMessages()) {
  console.log(`${m.role}: ${JSON.stringify(m.content)}`);
}
const exported = await branch.export(); // LionAGI's Branch.to_dict, a JSON value
console.log("exported messages:", (exported.messages as { progression: { order: string[] } }).progression.order.length);

for await (const item of watch) {
  if (item.case !== "commit") continue;
  for (const ev of item.value.events) console.log(`event ${ev.sequence} ${EventKind[ev.kind]}`);
  if (watch.cursor === 6n) break; // BRANCH_CREATED, four adds and the request's update
}

// Errors carry their reason.
try {
  await client.branch(randomUUID()).describe();
} catch (err) {
  if (err instanceof HistorydError && err.is(ErrorReason.BRANCH_NOT_FOUND)) {
    console.log("not found:", err.info.branchId !== undefined);
  }
}

// The Exchange: owners, a direct send, collect, then the recipient reads its inbox.
const [alice, bob] = [randomUUID(), randomUUID()];
await client.exchange.register(alice);
await client.exchange.register(bob);
await client.exchange.send(alice, bob, { text: "hi Bob" });
const collected = await client.exchange.collect(alice);
console.log("delivered:", collected.deliveredCount);
const popped = await client.exchange.pop(bob, alice);
console.log("bob got:", JSON.stringify(popped && genericContent(popped)));

client.close();
