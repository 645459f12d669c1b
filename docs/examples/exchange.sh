#!/usr/bin/env bash
# A walk through historyd's ExchangeService with grpcurl (ADR-0006 D5): register three owners, send
# a direct message and a broadcast, collect, receive and pop; then acknowledged delivery (issue 18):
# lease a message, see it marked in Receive and passed by PopMessage, and acknowledge it.
#
#   HISTORYD_ADDR  the server (default 127.0.0.1:50051); start one with `make run`
#   GRPCURL        a grpcurl binary (default: the pinned one, `go tool -modfile=tools/go.mod grpcurl`)
#
# Each step prints "### <label>: <method> <request>" and then the server's JSON response. The owners
# are fixed UUIDs and are unregistered first, so the script can run again against the same server.
set -euo pipefail

addr=${HISTORYD_ADDR:-127.0.0.1:50051}
if [ -n "${GRPCURL:-}" ]; then
	grpcurl=("$GRPCURL")
else
	cd "$(dirname "$0")/../.." # tools/go.mod is relative to the repository root
	grpcurl=(go tool -modfile=tools/go.mod grpcurl)
fi

A=aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa
B=bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb
C=cccccccc-cccc-4ccc-8ccc-cccccccccccc

# step LABEL METHOD: sends the JSON request read from stdin to ExchangeService/METHOD.
step() {
	local label=$1 method=$2 request
	request=$(cat)
	echo "### $label: $method $request"
	printf '%s' "$request" | "${grpcurl[@]}" -plaintext -d @ "$addr" "historyd.v1.ExchangeService/$method"
}

for owner in $A $B $C; do # a clean start: Unregister of an unknown owner answers {}
	echo "{\"owner_id\": \"$owner\"}" | step "leave $owner" Unregister >/dev/null
done

step "register A" Register <<<"{\"owner_id\": \"$A\"}"
# B's lease options: a message may be leased 3 times without an Ack before it becomes B's dead
# letter, and B's leases last 60 s unless a Lease asks otherwise (0 or absent: the server's flags).
step "register B" Register <<<"{\"owner_id\": \"$B\", \"max_attempts\": 3, \"visibility_timeout\": \"60s\"}"
step "register C" Register <<<"{\"owner_id\": \"$C\"}"

# content_json is JSON text inside the JSON request; recipient null is a broadcast, no recipient
# at all is UNSET (collect drops it and keeps it as a dead letter of the sender).
step "A to B" Send <<EOF
{"sender": "$A", "recipient": "$B", "content_json": "{\"text\": \"hello B\"}", "channel": "demo"}
EOF
step "A to nobody" Send <<EOF
{"sender": "$A", "content_json": "\"no recipient\""}
EOF
step "C to all" Send <<EOF
{"sender": "$C", "recipient": null, "content_json": "{\"text\": \"hello all\"}"}
EOF

# The report counts the owners each message reached; include_reached_owner_ids names them too.
step "collect A" Collect <<<"{\"owner_id\": \"$A\", \"include_reached_owner_ids\": true}"
step "collect all" CollectAll <<<"{}"

step "receive B" Receive <<<"{\"owner_id\": \"$B\"}"
step "pop B from A" PopMessage <<<"{\"owner_id\": \"$B\", \"sender\": \"$A\"}"
step "receive B again" Receive <<<"{\"owner_id\": \"$B\"}"
step "dead letters of A" ListDeadLetters <<<"{\"owner_id\": \"$A\"}"
step "owners" ListOwners <<<"{}"

# Acknowledged delivery (issue 18; docs/decisions/0020-leases.md). PopMessage removes a message as it
# returns it; a lease hides it instead, until an Ack removes it, a Nack gives it back, or its
# deadline passes (then it comes back, attempt 2). A sends B another message; B leases it.
step "A to B again" Send <<EOF
{"sender": "$A", "recipient": "$B", "content_json": "{\"text\": \"handle me\"}"}
EOF
step "collect A again" Collect <<<"{\"owner_id\": \"$A\"}"
leased=$(step "lease B from A" Lease <<<"{\"owner_id\": \"$B\", \"sender\": \"$A\", \"max_messages\": 10}")
printf '%s\n' "$leased"
# The receipt names this lease in Ack, Nack and ExtendLease.
receipt=$(sed -n 's/^ *"receipt": "\([^"]*\)".*/\1/p' <<<"$leased")
if [ -z "$receipt" ]; then
	echo "exchange.sh: Lease answered no receipt" >&2
	exit 1
fi
# Receive still shows the leased message, with its lease under "leases"; PopMessage passes it by ({}).
step "receive B leased" Receive <<<"{\"owner_id\": \"$B\"}"
step "pop B from A leased" PopMessage <<<"{\"owner_id\": \"$B\", \"sender\": \"$A\"}"
# Handled: the Ack removes it. A second Ack of the same receipt would be FAILED_PRECONDITION
# (ERROR_REASON_LEASE_STALE) and change nothing.
step "ack B" Ack <<<"{\"owner_id\": \"$B\", \"receipt\": \"$receipt\"}"
step "receive B acked" Receive <<<"{\"owner_id\": \"$B\"}"
