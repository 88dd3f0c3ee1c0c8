"""The scorer's prefix cache: hidden states of the validation set after the first d slots, keyed by the prefix."""
from __future__ import annotations

from collections import OrderedDict

import torch

from ..arch import Arch


class PrefixCache:
    """Hidden states of the validation set after a prefix of slots, keyed by the prefix (`arch[:d]`, an Arch)."""

    def __init__(self, max_bytes: int, keep: int):
        self.max_bytes, self.keep = max_bytes, keep
        self.states: OrderedDict[Arch, list[torch.Tensor]] = OrderedDict()  # LRU order, most recent last
        self.bytes = 0
        self.best: list[tuple[float, Arch]] = []  # (score, arch) of the `keep` best, best first
        self.pinned: dict[Arch, int] = {}  # prefix -> number of best archs through it
        self.hits = 0

    @staticmethod
    def _size(states: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in states)

    def longest(self, arch: Arch) -> tuple[int, list[torch.Tensor] | None]:
        for d in range(len(arch) - 1, 0, -1):
            states = self.states.get(arch[:d])
            if states is not None:
                self.states.move_to_end(arch[:d])
                self.hits += 1
                return d, states
        return 0, None

    def put(self, prefix: Arch, states: list[torch.Tensor]) -> None:
        if prefix in self.states:
            self.states.move_to_end(prefix)
            return
        size = self._size(states)
        if size > self.max_bytes:
            return
        self.states[prefix] = states
        self.bytes += size
        self._evict()

    def _evict(self) -> None:
        if self.bytes <= self.max_bytes:
            return
        for prefix in list(self.states):  # least recently used first; the best candidates' prefixes stay
            if self.bytes <= self.max_bytes:
                return
            if prefix not in self.pinned:
                self.bytes -= self._size(self.states.pop(prefix))
        while self.bytes > self.max_bytes and self.states:  # pinned prefixes alone exceed the budget
            prefix, states = self.states.popitem(last=False)
            self.bytes -= self._size(states)

    def scored(self, arch: Arch, score: float) -> None:
        """Keep the prefixes of the best `keep` candidates: the parents of the next generation."""
        if self.keep <= 0:
            return
        if len(self.best) >= self.keep and (-score, arch) >= (-self.best[-1][0], self.best[-1][1]):
            return
        self.best.append((score, arch))
        self.best.sort(key=lambda e: (-e[0], e[1]))
        for d in range(1, len(arch)):
            self.pinned[arch[:d]] = self.pinned.get(arch[:d], 0) + 1
        if len(self.best) > self.keep:
            _, out = self.best.pop()
            for d in range(1, len(out)):
                self.pinned[out[:d]] -= 1
                if not self.pinned[out[:d]]:
                    del self.pinned[out[:d]]
        self._evict()
