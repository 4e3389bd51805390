"""One convention for sizes (found trying the product: the relay printed KB of 1000 bytes,
the web demo KiB of 1024): the relay's `toolref_relay.ledger.size`, the Python home of the
convention, and the demo's `formatBytes` (examples/web-chat/src/sizes.js, run by the
machine's node as it is) read every number alike."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

from tests.support.processes import ROOT
from toolref_relay.ledger import size

SIZES_JS = ROOT / "examples" / "web-chat" / "src" / "sizes.js"
EDGES = [0, 1, 999, 1000, 1023, 1024, 1025, 1280, 1331, 88_100, 1_048_064, 1_048_575]
EDGES += [1_048_576, 1_572_864, 2**30 - 1, 2**30, 56_000_000_000, 2**40, 2**50]


def test_the_relay_and_the_demo_read_every_size_alike() -> None:
    node = shutil.which("node")
    assert node is not None, "no node on PATH: the demo and make test need node >= 20"
    rng = random.Random(11)
    numbers = EDGES + [rng.randrange(0, 2 ** rng.randrange(1, 45)) for _ in range(2000)]
    script = (
        f"import({json.dumps(SIZES_JS.as_uri())}).then(({{ formatBytes }}) => "
        f"process.stdout.write(JSON.stringify({json.dumps(numbers)}.map(formatBytes))))"
    )
    done = subprocess.run([node, "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [size(n) for n in numbers]
    assert [size(n) for n in (1023, 1024, 1280, 1_048_575, 2**40)] == [
        "1023 B",
        "1.0 KiB",
        "1.3 KiB",  # 1.25 KiB: the half up, in both (toFixed and format had differed)
        "1.0 MiB",
        "1.0 TiB",
    ]
