"""Locust load test: chat backends, SDK clients and summary readers in a realistic mix.

Run by `make loadtest` (see `loadtests/loadrun.py`); by hand:

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8750 --headless -u 50 -r 10 -t 60s

Conversations come from the shared traces (`../shared/traces`), replayed turn by turn as they
grow; where the traces are absent, synthetic coding-agent conversations stand in.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from locust import between, task
from locust.contrib.fasthttp import FastHttpUser

from loadtests import traces
from loadtests.workload import invocation, synthetic

HEADERS = {"Toolref-Protocol": "2", "Content-Type": "application/json"}


def conversations() -> list[list[dict[str, Any]]]:
    found = [trace.messages for trace in traces.load()]
    return found or [synthetic(n) for n in range(8)]


CONVERSATIONS = conversations()
_next = itertools.count()


class ChatBackend(FastHttpUser):
    """A chat backend: each turn, optimize the conversation so far, then hydrate it."""

    weight = 3
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.messages = CONVERSATIONS[next(_next) % len(CONVERSATIONS)]
        self.turn = 2

    @task
    def turn_of_a_conversation(self) -> None:
        self.turn = self.turn + 2 if self.turn < len(self.messages) else 2
        history = self.messages[: self.turn]
        with self.client.post(
            "/v1/messages:optimize",
            json={"messages": history},
            headers=HEADERS,
            name="optimize",
            catch_response=True,
        ) as answer:
            if answer.status_code != 200:
                answer.failure(f"optimize: HTTP {answer.status_code}: {answer.text[:200]}")
                return
            optimized = answer.json()["messages"]
        with self.client.post(
            "/v1/messages:hydrate",
            json={"messages": optimized},
            headers=HEADERS,
            name="hydrate",
            catch_response=True,
        ) as answer:
            if answer.status_code != 200:
                answer.failure(f"hydrate: HTTP {answer.status_code}: {answer.text[:200]}")


class SdkClient(FastHttpUser):
    """A client app's SDK: register new results, ask what is missing, resolve refs."""

    weight = 2
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.refs: list[str] = []

    @task(2)
    def register(self) -> None:
        body = {"invocations": [invocation(random.choice((400, 4000, 20000))) for _ in range(5)]}
        with self.client.post(
            "/v1/invocations", json=body, headers=HEADERS, name="register", catch_response=True
        ) as answer:
            if answer.status_code != 200:
                answer.failure(f"register: HTTP {answer.status_code}")
                return
            self.refs = ([r["ref"] for r in answer.json()["refs"]] + self.refs)[:200]

    @task(2)
    def find_missing(self) -> None:
        if self.refs:
            body = {"refs": random.sample(self.refs, min(50, len(self.refs)))}
            self.client.post(
                "/v1/invocations:findMissing", json=body, headers=HEADERS, name="findMissing"
            )

    @task(3)
    def resolve(self) -> None:
        if self.refs:
            body = {"refs": random.sample(self.refs, min(20, len(self.refs)))}
            self.client.post("/v1/invocations:resolve", json=body, headers=HEADERS, name="resolve")


class SummaryReader(FastHttpUser):
    """Someone looking at older results through their cached summaries."""

    weight = 1
    wait_time = between(0.1, 0.3)

    def on_start(self) -> None:
        body = {"invocations": [invocation(6000) for _ in range(10)]}
        answer = self.client.post("/v1/invocations", json=body, headers=HEADERS, name="register")
        self.refs = [r["ref"] for r in answer.json()["refs"]] if answer.status_code == 200 else []

    @task
    def summary(self) -> None:
        if self.refs:
            ref = random.choice(self.refs)
            self.client.get(f"/v1/invocations/{ref}/summary", headers=HEADERS, name="summary")
