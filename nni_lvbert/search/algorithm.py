"""LV-BERT Algorithm 1 (the SPOS evolutionary search) as one pure ask/tell class, without NNI.

Both NNI adapters drive this class: `strategy.LVBertEvolution` (a `nni.nas` Strategy, in process) and
`tuner.LVBertEvolutionTuner` (an `nni.tuner.Tuner`, for nnictl). Nothing here imports NNI or torch: a candidate is
an `arch.Arch` (one value per label, in label order), which is plain Python.

    P_0 = P random candidates;  top-k = {}
    for n = 0 .. T-1:
        score P_n;  top-k = best k of (top-k U P_n)
        if n < T-1:  P_{n+1} = N_cro crossovers + N_mut mutations of top-k members
    return best of top-k

Budget accounting: the last generation built is the one scored in iteration T-1 (the paper scores T populations),
so a search scores exactly  P + (T-1) * (N_cro + N_mut)  candidates: 50 + 19 * 50 = 1000 with the paper's values.

Details that the paper leaves open, and the choices made here (they follow the SPOS reference code):
- crossover: two distinct random top-k parents, each slot from either with probability 1/2;
- mutation: a random top-k parent, each slot re-drawn uniformly (possibly the same value) with probability p;
- a child that was already proposed (scored, running or in the current population) or that breaks the
  constraints is rejected and drawn again; after 10 * N failed crossover (mutation) draws the rest of the
  generation is filled with random candidates, so every generation has its full size;
- the top-k is ordered by score, ties broken by the architecture (so the scoring order does not matter), and a
  generation is handed out in lexicographic order: consecutive candidates then share the longest prefixes of
  slots, which the in-process scorer reuses (`scorer.SupernetScorer`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from ..arch import Arch
from ..errors import UserError
from ..options import opt


@dataclass(frozen=True)
class EvolutionConfig:
    GROUP: ClassVar[str] = "Algorithm 1 (LV-BERT; the budget P + (T-1)(N_cro + N_mut) applies to every strategy)"

    population: int = opt(50, "P, random initial population")
    iterations: int = opt(20, "T, populations scored")
    topk: int = opt(10, "k")
    crossover: int | None = opt(None, "N_cro per generation (default P/2, as LV-BERT's Algorithm 1: 25 at P = 50)")
    mutation: int | None = opt(None, "N_mut per generation (default P - P/2: 25 at P = 50)")
    mutation_prob: float = opt(0.1, "per-slot mutation probability")
    max_rejections: int = 10_000  # consecutive constraint rejections before giving up

    def __post_init__(self):
        """N_cro and N_mut not given: derived from the population (P/2 each), so a smaller population gets a
        proportionally smaller search instead of 50 offspring per generation."""
        p = self.population if isinstance(self.population, (int, np.integer)) else 0
        if self.crossover is None:
            object.__setattr__(self, "crossover", p // 2)
        if self.mutation is None:
            object.__setattr__(self, "mutation", p - p // 2)

    def budget_text(self) -> str:
        return (f"P + (T-1)(N_cro + N_mut) = {self.population} + {self.iterations - 1} x ({self.crossover} + "
                f"{self.mutation}) = {self.budget} evaluations")

    @property
    def budget(self) -> int:
        """Number of candidates scored by a full search."""
        if self.population <= 0 or self.iterations <= 0:
            return 0
        return self.population + (self.iterations - 1) * (self.crossover + self.mutation)

    def generation_size(self, generation: int) -> int:
        return self.population if generation == 0 else self.crossover + self.mutation

    def iteration_of(self, index: int) -> int:
        """Iteration (generation) of the `index`-th scored candidate of a full search."""
        if index < self.population:
            return 0
        return 1 + (index - self.population) // max(1, self.crossover + self.mutation)

    def validate(self) -> None:
        for name in ("population", "iterations", "topk", "crossover", "mutation", "max_rejections"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise UserError(f"{name} must be a non-negative integer, got {value!r}")
        if self.budget == 0:
            raise UserError(f"the search budget is 0 evaluations (population {self.population}, iterations "
                            f"{self.iterations}); both must be at least 1")
        if self.iterations > 1 and self.crossover + self.mutation == 0:
            raise UserError("crossover + mutation must be at least 1 when iterations > 1")
        if self.topk < 1:
            raise UserError(f"topk must be at least 1, got {self.topk}")
        if not 0.0 <= self.mutation_prob <= 1.0:
            raise UserError(f"mutation probability must be in [0, 1], got {self.mutation_prob}")
        if self.max_rejections < 1:
            raise UserError(f"max_rejections must be at least 1, got {self.max_rejections}")

    def to_dict(self) -> dict:
        return asdict(self)


class ConstraintError(UserError):
    """No candidate satisfying the constraints was found."""


class Algorithm1:
    """Ask/tell LV-BERT Algorithm 1 over a space of categorical choices.

    `choices` maps each label to its values (e.g. {"layer00": ["dc", "sa", "ff", "glu"], ...}); architectures go
    in and out as dicts {label: value} (what NNI hands out and freezes); inside, each is an `Arch` of the values in
    label order (`key`). `accept(arch_dict) -> bool` is an optional constraint: rejected candidates are never
    handed out. `ask()` returns the next candidate, or None when the current generation is all handed out but not
    all scored (wait for `tell`), or when the search is finished (`finished`).
    """

    def __init__(self, choices: Mapping[str, Sequence], config: EvolutionConfig | None = None, seed: int = 0,
                 accept: Callable[[dict], bool] | None = None):
        self.config = config or EvolutionConfig()
        self.config.validate()
        if not choices:
            raise UserError("the search space has no choices")
        self.labels = list(choices)
        self.values = [list(v) for v in choices.values()]
        if any(len(v) == 0 for v in self.values):
            raise UserError("every label of the search space needs at least one value")
        self.seed = seed
        self.accept = accept
        self.rng = np.random.default_rng(seed)
        self.space_size = math.prod(len(v) for v in self.values)

        self.generation = 0  # index of the generation being handed out / scored
        self.population: list[Arch] = []  # the current generation, in hand-out order
        self.asked: set[Arch] = set()  # handed out and not yet told (running)
        self.scores: dict[Arch, float | None] = {}  # told (None = failed), in telling order
        self.generation_of: dict[Arch, int] = {}
        self.topk: list[Arch] = []  # best first
        self.origin: dict[Arch, tuple] = {}  # ("random",) | ("crossover", a, b) | ("mutation", parent)
        self.finished = False
        self.rejected = {"constraint": 0, "duplicate": 0}
        self._started = False
        self._building: set[Arch] = set()  # candidates of the generation being built
        self._consecutive = 0  # consecutive constraint rejections

    # ------------------------------------------------------------------ ask / tell
    def ask(self) -> dict | None:
        if self.finished:
            return None
        if not self._started:
            self._started = True
            self.population = self._initial_population()
            self._check_generation_end()
            if self.finished:
                return None
        for arch in self.population:
            if arch not in self.asked and arch not in self.scores:
                self.asked.add(arch)
                return self.to_dict(arch)
        return None  # everything handed out: wait for the results

    def tell(self, arch, score: float | None) -> None:
        """Record the score of a candidate handed out by `ask` (None: the evaluation failed)."""
        key = self.key(arch)
        if key not in self.asked:
            raise KeyError(f"{self.to_dict(key)} was not handed out by ask() or was already told")
        self.asked.discard(key)
        self.scores[key] = None if score is None or (isinstance(score, float) and math.isnan(score)) else float(score)
        self._check_generation_end()

    def ask_all(self) -> list[dict]:
        """Every candidate of the current generation that can be handed out now."""
        out = []
        while (arch := self.ask()) is not None:
            out.append(arch)
        return out

    @property
    def evaluated(self) -> int:
        return len(self.scores)

    def best(self) -> tuple[dict, float] | None:
        """Best of the top-k (None before any score)."""
        if not self.topk:
            return None
        return self.to_dict(self.topk[0]), self.scores[self.topk[0]]

    # ------------------------------------------------------------------ helpers
    def key(self, arch) -> Arch:
        """The Arch of a dict {label: value} (or of values in label order)."""
        if isinstance(arch, Arch):
            return arch
        if isinstance(arch, Mapping):
            try:
                return Arch(arch[label] for label in self.labels)
            except KeyError as exc:
                raise KeyError(f"architecture lacks label {exc.args[0]}") from None
        return Arch(arch)

    def to_dict(self, arch: Arch) -> dict:
        return dict(zip(self.labels, arch))

    def _check_generation_end(self) -> None:
        """When every candidate of the generation is told: update the top-k and build the next generation."""
        if self.asked or any(a not in self.scores for a in self.population):
            return
        scored = [a for a in self.population if self.scores.get(a) is not None]
        pool = set(self.topk) | set(scored)
        self.topk = sorted(pool, key=self._rank)[: self.config.topk]
        if self.generation + 1 >= self.config.iterations:
            self.finished = True
            return
        self.generation += 1
        self.population = self._next_population()
        if not self.population:  # the space (or the constraint-satisfying part of it) is exhausted
            self.finished = True

    def _rank(self, arch: Arch):
        return (-self.scores[arch], arch)

    def _seen(self, arch: Arch) -> bool:
        return arch in self.scores or arch in self.asked or arch in self._building

    def _admit(self, arch: Arch) -> bool:
        """True if `arch` is new and satisfies the constraints; counts consecutive constraint rejections."""
        if self._seen(arch):
            self.rejected["duplicate"] += 1
            return False
        if self.accept is not None and not self.accept(self.to_dict(arch)):
            self.rejected["constraint"] += 1
            self._consecutive += 1
            if self._consecutive >= self.config.max_rejections:
                raise ConstraintError(f"no architecture satisfying the constraints was found in "
                                      f"{self._consecutive} consecutive draws")
            return False
        self._consecutive = 0
        self._building.add(arch)
        self.generation_of[arch] = self.generation
        return True

    def crossover(self, a: Arch, b: Arch) -> Arch:
        """Each slot from parent a or parent b with probability 1/2."""
        pick = self.rng.integers(2, size=len(a))
        return Arch(b[s] if pick[s] else a[s] for s in range(len(a)))

    def mutate(self, parent: Arch) -> Arch:
        """Each slot re-drawn uniformly (possibly to the same value) with probability p."""
        redraw = self.rng.random(len(parent)) < self.config.mutation_prob
        return Arch(self.values[s][int(self.rng.integers(len(self.values[s])))] if redraw[s] else parent[s]
                    for s in range(len(parent)))

    def _random(self) -> Arch:
        return Arch(vals[int(self.rng.integers(len(vals)))] for vals in self.values)

    def _fill_random(self, out: list[Arch], n: int) -> None:
        remaining = self.space_size - len(self.scores) - len(self.asked) - len(self._building)
        misses = 0
        while len(out) < n and remaining > 0:
            arch = self._random()
            if self._admit(arch):
                self.origin[arch] = ("random",)
                out.append(arch)
                remaining -= 1
                misses = 0
            else:
                misses += 1
                if misses >= max(self.config.max_rejections, 10 * self.space_size):
                    break  # practically exhausted (duplicates only)

    def _initial_population(self) -> list[Arch]:
        self._building: set[Arch] = set()
        self._consecutive = 0
        out: list[Arch] = []
        self._fill_random(out, self.config.population)
        return self._finish(out)

    def _next_population(self) -> list[Arch]:
        self._building = set()
        self._consecutive = 0
        out: list[Arch] = []
        parents = self.topk
        if parents:
            # crossover
            made, tries = 0, 0
            while made < self.config.crossover and tries < 10 * self.config.crossover:
                tries += 1
                if len(parents) >= 2:
                    i, j = self.rng.choice(len(parents), size=2, replace=False)
                else:
                    i = j = 0
                a, b = parents[int(i)], parents[int(j)]
                child = self.crossover(a, b)
                if self._admit(child):
                    self.origin[child] = ("crossover", a, b)
                    out.append(child)
                    made += 1
            # mutation
            made, tries = 0, 0
            while made < self.config.mutation and tries < 10 * self.config.mutation:
                tries += 1
                parent = parents[int(self.rng.integers(len(parents)))]
                child = self.mutate(parent)
                if self._admit(child):
                    self.origin[child] = ("mutation", parent)
                    out.append(child)
                    made += 1
        # SPOS: whatever crossover and mutation could not produce is filled with random candidates
        self._fill_random(out, self.config.crossover + self.config.mutation)
        return self._finish(out)

    def _finish(self, out: list[Arch]) -> list[Arch]:
        self._building = set()
        return sorted(out)  # lexicographic hand-out order: neighbours share prefixes

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """JSON-serialisable state; candidates handed out but not told are handed out again after loading."""
        enc = lambda a: list(a)
        return {
            "version": 1,
            "config": self.config.to_dict(),
            "seed": self.seed,
            "labels": self.labels,
            "values": self.values,
            "rng": self.rng.bit_generator.state,
            "started": self._started,
            "generation": self.generation,
            "population": [enc(a) for a in self.population],
            "scores": [[enc(a), s] for a, s in self.scores.items()],
            "generation_of": [[enc(a), g] for a, g in self.generation_of.items()],
            "topk": [enc(a) for a in self.topk],
            "origin": [[enc(a), o[0], *[enc(x) for x in o[1:]]] for a, o in self.origin.items()],
            "finished": self.finished,
            "rejected": dict(self.rejected),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise UserError(f"unsupported search state version {state.get('version')!r}")
        if state["labels"] != self.labels or state["values"] != self.values:
            raise UserError("the saved search state belongs to another search space")
        if EvolutionConfig(**state["config"]) != self.config or state["seed"] != self.seed:
            raise UserError("the saved search state was made with other evolution settings or seed")
        self.rng.bit_generator.state = state["rng"]
        self._started = state["started"]
        self.generation = state["generation"]
        self.population = [Arch(a) for a in state["population"]]
        self.scores = {Arch(a): s for a, s in state["scores"]}
        self.generation_of = {Arch(a): g for a, g in state["generation_of"]}
        self.topk = [Arch(a) for a in state["topk"]]
        self.origin = {Arch(a): (kind, *[Arch(x) for x in parents]) for a, kind, *parents in state["origin"]}
        self.finished = state["finished"]
        self.rejected = dict(state["rejected"])
        self.asked = set()

