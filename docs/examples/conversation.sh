#!/usr/bin/env bash
# A conversation kept by historyd's HistoryService, with grpcurl only (ADR-0006 D3): create a branch
# with a system message, add an instruction, an assistant response from a raw OpenAI-shaped
# response, a tool call (an action request) and its result, then list the branch, project it as
# chat messages (LionAGI's and OpenAI's shapes), and export it as LionAGI JSON.
#
#   HISTORYD_ADDR  the server (default 127.0.0.1:50051); start one with `make run`
#   GRPCURL        a grpcurl binary (default: the pinned one, `go tool -modfile=tools/go.mod grpcurl`)
#
# Each step prints "### <label>: <method> <request>" and then the server's JSON response. The branch
# has a fixed id and is deleted first, so the script can run again against the same server.
set -euo pipefail

addr=${HISTORYD_ADDR:-127.0.0.1:50051}
if [ -n "${GRPCURL:-}" ]; then
	grpcurl=("$GRPCURL")
else
	cd "$(dirname "$0")/../.." # tools/go.mod is relative to the repository root
	grpcurl=(go tool -modfile=tools/go.mod grpcurl)
fi

BRANCH=0c0ffee0-0000-4000-8000-000000000001

# call METHOD: sends the JSON request read from stdin to HistoryService/METHOD.
call() {
	"${grpcurl[@]}" -plaintext -d @ "$addr" "historyd.v1.HistoryService/$1"
}

# step LABEL METHOD: prints the request and the response.
step() {
	local label=$1 method=$2 request
	request=$(tr '\n' ' ')
	echo "### $label: $method $request"
	printf '%s' "$request" | call "$method"
}

# first_id: the first "id" of a response (its message's or branch's).
# (One sed that reads all its input: `| head -n 1` can end the writer with SIGPIPE under pipefail.)
first_id() { sed -n 's/^ *"id": "\([^"]*\)",*$/\1/p' | sed -n 1p; }

# A clean start: delete the branch if an earlier run left it (NOT_FOUND otherwise, ignored).
echo "{\"branch_id\": \"$BRANCH\"}" | call DeleteBranch >/dev/null 2>&1 || true

step "create" CreateBranch <<EOF
{"branch_id": "$BRANCH", "name": "demo", "user": "alice",
 "system": {"system_message": "You are a careful calculator."}}
EOF

# Instruction fields that LionAGI types as any JSON travel as JSON text (context_json). A write
# returns the prompt text it stored only when asked (include_rendered).
step "instruction" AddMessage <<EOF
{"branch_id": "$BRANCH", "sender": "alice", "recipient": "assistant", "include_rendered": true,
 "instruction": {"instruction": "What is 30 + 12?", "context_json": ["{\"a\": 30, \"b\": 12}"]}}
EOF

# The raw provider response goes in as JSON text; from_response extracts the text and keeps the raw
# value in metadata.model_response.
step "assistant" AddMessage <<EOF
{"branch_id": "$BRANCH", "include_rendered": true,
 "assistant_response": {"raw_response_json": "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion\", \"model\": \"gpt-4o-mini\", \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"I will call add.\"}, \"finish_reason\": \"tool_calls\"}], \"usage\": {\"prompt_tokens\": 20, \"completion_tokens\": 5, \"total_tokens\": 25}}"}}
EOF

# The tool call's id is read from its response, for the tool result to answer it.
tool_call=$(step "tool call" AddMessage <<EOF
{"branch_id": "$BRANCH", "include_rendered": true,
 "action_request": {"function": "add", "arguments_json": "{\"a\": 30, \"b\": 12}"}}
EOF
)
echo "$tool_call"
REQUEST=$(printf '%s\n' "$tool_call" | sed 1d | first_id)

step "tool result" CreateActionResponse <<EOF
{"branch_id": "$BRANCH", "action_request_id": "$REQUEST", "output_json": "42", "include_rendered": true}
EOF

step "list" ListMessages <<<"{\"branch_id\": \"$BRANCH\"}"
step "chat" ToChatMessages <<<"{\"branch_id\": \"$BRANCH\"}"
# The same projection in the shape of OpenAI's Chat Completions `messages`, as JSON text.
step "chat openai" ToChatMessages <<<"{\"branch_id\": \"$BRANCH\", \"format\": \"CHAT_FORMAT_OPENAI\"}"
step "export" ExportBranch <<<"{\"branch_id\": \"$BRANCH\", \"mode\": \"SERIALIZATION_MODE_JSON\"}"

# The export's data is LionAGI JSON text; with jq at hand, print it as JSON.
if command -v jq >/dev/null 2>&1; then
	echo "### LionAGI JSON: ExportBranch data"
	echo "{\"branch_id\": \"$BRANCH\"}" | call ExportBranch | jq -r .data | jq .
fi
