#!/usr/bin/env bash
# Regenerates the Python stubs of clients/python (`make gen-python`, part of `make gen-clients`):
# historyd/v1/*_pb2.py and *_pb2_grpc.py from proto/historyd/v1/, and google.rpc's status and
# error_details from the vendored clients/vendor/google/rpc/ (Debian packages neither
# googleapis-common-protos nor grpcio-status), into src/historyd/. Deterministic: the same protoc
# writes the same bytes, so `make proto-check` can compare.
#
#   PROTOC       the protoc command (default: protoc, Debian's protobuf-compiler, 3.21)
#   GRPC_PLUGIN  protoc-gen-grpc_python (default: Debian's grpc_python_plugin, grpcio 1.51)
#   OUT          the output root (default: src/ of this directory; proto-check passes a temp dir)
#
# With a newer grpcio/protobuf from PyPI, regenerate with grpcio-tools instead, whose protoc has the
# gRPC plugin built in:  PROTOC="python -m grpc_tools.protoc" GRPC_PLUGIN=builtin ./gen.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$here/src}
read -r -a protoc <<<"${PROTOC:-protoc}"
plugin=${GRPC_PLUGIN:-$(command -v grpc_python_plugin || true)}

if ! command -v "${protoc[0]}" >/dev/null 2>&1; then
	echo "gen.sh: ${protoc[0]} not found (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
	exit 1
fi
if [ "$plugin" = builtin ]; then
	grpc_flags=(--grpc_python_out="$out")
elif [ -n "$plugin" ]; then
	grpc_flags=(--plugin=protoc-gen-grpc_python="$plugin" --grpc_python_out="$out")
else
	echo 'gen.sh: grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)' >&2
	exit 1
fi

# The well-known types (struct, timestamp, any, duration) come with protoc's own include path;
# Debian's protoc finds /usr/include, grpc_tools its bundled copy.
mkdir -p "$out"
rm -f "$out"/historyd/v1/*_pb2.py "$out"/historyd/v1/*_pb2_grpc.py
(cd "$root/proto" && "${protoc[@]}" -I. --python_out="$out" "${grpc_flags[@]}" historyd/v1/*.proto)
touch "$out/historyd/v1/__init__.py"

# google.rpc goes inside the package (historyd/_rpc/), not into a top-level google.rpc that would
# shadow googleapis-common-protos. The descriptors keep their file names (google/rpc/*.proto) and
# are the same bytes as upstream's, so both can be loaded in one process.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root/clients/vendor" && "${protoc[@]}" -I. --python_out="$tmp" google/rpc/status.proto google/rpc/error_details.proto)
mkdir -p "$out/historyd/_rpc"
cp "$tmp/google/rpc/status_pb2.py" "$tmp/google/rpc/error_details_pb2.py" "$out/historyd/_rpc/"
touch "$out/historyd/_rpc/__init__.py"
echo "gen.sh: wrote $out/historyd/v1 and $out/historyd/_rpc with $("${protoc[@]}" --version)"
