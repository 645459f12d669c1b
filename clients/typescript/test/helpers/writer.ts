// A second process that writes to a branch, for the watch test: `node writer.js ADDR BRANCH N TAG`
// adds N instructions ("TAG i") to BRANCH, then an assistant response and an action pair, and
// prints one JSON line with the head sequence after its last write and the ids it wrote.

import { connect } from "../../src/index.js";

const [addr, branchId, count, tag] = process.argv.slice(2);
if (!addr || !branchId || !count || !tag) {
  console.error("usage: node writer.js ADDR BRANCH N TAG");
  process.exit(2);
}

const client = connect(addr, { tls: false });
try {
  const branch = client.branch(branchId);
  const ids: string[] = [];
  for (let i = 0; i < Number(count); i++) {
    ids.push((await branch.addInstruction(`${tag} ${i}`)).id);
  }
  ids.push((await branch.addAssistantResponse(`${tag} done`)).id);
  const call = await branch.addActionRequest("count", { tag });
  ids.push(call.id);
  const result = await branch.respond(call, Number(count));
  ids.push(result.id);
  const head = (await branch.describe()).headSequence;
  console.log(JSON.stringify({ head: head.toString(), ids }));
} finally {
  client.close();
}
