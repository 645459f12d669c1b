// A second process that writes to a branch, for the watch test: `node lib/writer.mjs ADDR BRANCH N
// TAG` adds N instructions ("TAG i") to BRANCH, then an assistant response and an action pair,
// and prints one JSON line with the head sequence after its last write and the ids it wrote.

import { connect } from './historyd.mjs';

const [addr, branchId, count, tag] = process.argv.slice(2);
if (!addr || !branchId || !count || !tag) {
  console.error('usage: node lib/writer.mjs ADDR BRANCH N TAG');
  process.exit(2);
}

const client = connect(addr);
try {
  const ids = [];
  let head = '0';
  for (let i = 0; i < Number(count); i++) {
    const resp = await client.history.AddMessage({ branch_id: branchId, instruction: { instruction: `${tag} ${i}` } });
    ids.push(resp.message.id);
    head = resp.head_sequence;
  }
  const answer = await client.history.AddMessage({ branch_id: branchId, assistant_response: { text: `${tag} done` } });
  ids.push(answer.message.id);
  const call = await client.history.AddMessage({ branch_id: branchId, action_request: { function: 'count', arguments_json: `{"tag": "${tag}"}` } });
  ids.push(call.message.id);
  const result = await client.history.CreateActionResponse({ branch_id: branchId, action_request_id: call.message.id, output_json: count });
  ids.push(result.action_response.id);
  head = result.head_sequence;
  console.log(JSON.stringify({ head, ids }));
} finally {
  client.close();
}
