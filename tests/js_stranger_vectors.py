"""`stranger` vectors for the TypeScript SDK (client_sdk/js/test/stranger-vectors.test.ts):
for every status an answer to an edit from no receiver of edits may carry (100-599), whether
the request goes again as it is and how edits pause, by the Python rule
(`toolref.sending.stranger`). Python's pauses are seconds; JS's are milliseconds, so the JS
test multiplies each by 1000. Relay, Python SDK and JS SDK must do the same with the same
answer: sent again where one SDK hands it on, a proxy's 504 costs the user a second model
call in one SDK and not the other. Written into vectors.json by `tests.js_vectors`.
"""

from __future__ import annotations

from typing import Any

from toolref.sending.stranger import resent, stranger_pause


def build() -> list[dict[str, Any]]:
    return [
        {"status": status, "resent": resent(status), "pause": stranger_pause(status)}
        for status in range(100, 600)
    ]
