"""A worker host on its own network: a namespace joined to this host by a veth pair.

Faults cut or thin the traffic on the host end of the pair with iptables (a full partition: every
packet dropped, so connections hang rather than reset; packet loss: a random share dropped). The
kernel here may lack `tc netem`, which is why loss is done with iptables' statistic match.
Everything needs root; `WorkerNetwork.create` says why it cannot when it cannot.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field


class NetworkUnavailable(Exception):
    """This machine cannot give a worker its own network (not root, no `ip`, no iptables)."""


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise NetworkUnavailable(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")


@dataclass
class WorkerNetwork:
    name: str
    host_if: str
    host_ip: str
    worker_ip: str
    _rules: list[list[str]] = field(default_factory=list)

    @classmethod
    def create(cls, tag: str) -> WorkerNetwork:
        if os.geteuid() != 0:
            raise NetworkUnavailable("network namespaces need root")
        for tool in ("ip", "iptables"):
            if shutil.which(tool) is None:
                raise NetworkUnavailable(f"{tool} is not installed (scripts/install-system-deps.sh)")
        subnet = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        net = cls(f"tsoak-{tag}", f"tsk{tag}"[:15], f"{subnet}.1", f"{subnet}.2")
        peer = f"tsp{tag}"[:15]
        try:
            _run("ip", "netns", "add", net.name)
            _run("ip", "link", "add", net.host_if, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", net.name)
            _run("ip", "addr", "add", f"{net.host_ip}/24", "dev", net.host_if)
            _run("ip", "link", "set", net.host_if, "up")
            _run("ip", "netns", "exec", net.name, "ip", "addr", "add", f"{net.worker_ip}/24", "dev", peer)
            _run("ip", "netns", "exec", net.name, "ip", "link", "set", peer, "up")
            _run("ip", "netns", "exec", net.name, "ip", "link", "set", "lo", "up")
            # Proves iptables works here before any fault depends on it.
            net._add_rule(["-m", "statistic", "--mode", "random", "--probability", "0"])
            net.heal()
        except NetworkUnavailable:
            net.destroy()
            raise
        return net

    def command_prefix(self) -> list[str]:
        """Runs a command inside the namespace (`ip netns exec` execs it: the pid stays the same)."""
        return ["ip", "netns", "exec", self.name]

    def _add_rule(self, match: list[str]) -> None:
        for chain, direction in (("INPUT", "-i"), ("OUTPUT", "-o")):
            rule = [chain, direction, self.host_if, *match, "-j", "DROP"]
            _run("iptables", "-I", *rule)
            self._rules.append(rule)

    def partition(self) -> None:
        """Every packet between the worker and the database is dropped, both ways."""
        self._add_rule([])

    def lose_packets(self, share: float) -> None:
        """Drops a random `share` of the packets, both ways."""
        self._add_rule(["-m", "statistic", "--mode", "random", "--probability", f"{share:.3f}"])

    def heal(self) -> None:
        while self._rules:
            rule = self._rules.pop()
            subprocess.run(["iptables", "-D", *rule], capture_output=True, timeout=30)

    def destroy(self) -> None:
        self.heal()
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
