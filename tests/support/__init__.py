"""Test support shared by the tests, the load tests and the examples.

It imports product code and nothing else of the repository: never a test module, `loadtests`
or `examples` (tests/unit/test_layers.py checks it), so load tests and examples can use it
while the tests import the load tests to test them, and the arrows go one way.
"""

from __future__ import annotations

import os

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
