"""``method="ssa"`` and ``method="gradssa"``: sparrow search over fusion cut vectors.

Both search the fusion plans of MODEL.md section 3 through their cut vectors
``x in {0,1}^(n-1)`` over backward order (:meth:`~fusionopt.model.Plan.from_cuts`) and
score them in batches with :func:`~fusionopt.model.score_cuts`, so they run on every
model option (copy cost, contention, several channels), where the DP does not apply.

* :class:`SparrowSearch` is the sparrow search algorithm of Xue and Shen (2020) coded from
  its equations (docs/methods.md, section ssa), as an ask/tell object; :func:`ssa` drives it.
* :class:`GradSSA` is **our** sparrow search for tensor fusion: the paper of Gao et al.
  (2023) names an improved sparrow search but its changes are not public, so every change
  here is our own choice, documented in the class.

**Encoding (our choice, both methods).** A sparrow is a position ``z`` in the box
``[0, 1]^(n-1)``; it decodes to the cut vector ``x_j = z_j > 0.5`` (:func:`decode`).
Positions are clipped to the box after every move. A cut vector is encoded as
``z = 0.25 + 0.5 x`` (:func:`encode`); a position whose plan must change in some bits
(repair, local search) has those coordinates mirrored, ``z_j <- 1 - z_j``, which keeps
their distance from the threshold (``0.5`` itself goes to 0.25 or 0.75).

**Caps (both methods).** ``max_message_bytes`` is enforced by *repair*: every position is
decoded, given a cut before each tensor that would overflow its message (scanning in
backward order, the rule of the ``threshold`` baseline) and written back (mirrored bits)
before it is evaluated, so every evaluated plan respects the byte cap. ``max_messages`` is
enforced by a *death penalty*: a plan with too many messages scores ``+inf``. The seeds
include the single message repaired for the byte cap, the plan with the fewest messages,
which :func:`~fusionopt.model._fusion_dp.check_caps` has checked to be feasible, so a
feasible plan is always known; the returned plan is checked against both caps.

**Cost.** On the plain model ``score_cuts`` evaluates over a million plans per second;
with copy cost or contention (one channel) about three times fewer; with ``channels > 1``
it computes each plan's processor-sharing schedule on its own
(:func:`~fusionopt.model.channel_schedule`, a few thousand plans per second), and
GradSSA samples its neighbourhoods. ``benchmarks/results/gradssa.md`` has the measured
evaluations per second and times to within 0.1% of the optimum; with the defaults GradSSA
takes about a second on the plain zoo models. A ``time_limit`` bounds the search (checked
between iterations). Ctrl-C during the search raises
:class:`~fusionopt.solvers.Interrupted`, whose ``result`` is the best plan so far
(status ``INTERRUPTED``, judged like every result); during the seeding it is a plain
``KeyboardInterrupt``.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from fusionopt.model._fusion import backward_arrays
from fusionopt.model._fusion_eval import score_cuts
from fusionopt.model._fusion_dp import check_caps
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._result import Interrupted, Outcome, Result, Status
from fusionopt.solvers._catalogue import deadline as solve_deadline, method
import fusionopt.solvers._warm as warm

THRESHOLD = 0.5
# Smallest positive float: the paper's "smallest constant" against division by zero (Eq. 5).
_EPSILON = np.finfo(np.float64).tiny
# Most position entries in one batch of neighbours (32 MiB of float64).
_BLOCK_ENTRIES = 1 << 22
# Baselines GradSSA seeds its population with, solved as warm starts (fusionopt.solvers._warm).
GRADSSA_SEEDS = ("wfbp", "single", "threshold", "ddp", "horovod", "mgwfbp")
# Seeds whose solve grows with n^2 (MG-WFBP's merges), and about how long they take per
# n^2 (1.4 s for DenseNet-201's 604 tensors on the reference host): with a time_limit below
# that, GradSSA seeds without them rather than overrun.
QUADRATIC_SEEDS = ("mgwfbp",)
QUADRATIC_SEED_SECONDS = 4e-6
# Neighbours sampled per iteration by GradSSA when each plan is simulated (channels > 1).
SAMPLED_NEIGHBOURS = 32


# ---------------------------------------------------------------------------- encoding
def decode(positions: np.ndarray) -> np.ndarray:
    """Cut vectors of positions: ``x_j = z_j > 0.5`` (works on one row or a matrix).

    >>> decode(np.array([[0.9, 0.5, 0.1]])).tolist()
    [[True, False, False]]
    """
    return np.asarray(positions) > THRESHOLD


def encode(cuts: np.ndarray) -> np.ndarray:
    """Positions of cut vectors: ``z = 0.25 + 0.5 x``, a quarter of the box from the threshold.

    >>> encode(np.array([True, False])).tolist()
    [0.75, 0.25]
    """
    return 0.25 + 0.5 * np.asarray(cuts, dtype=np.float64)


def _mirror(positions: np.ndarray, flip: np.ndarray) -> np.ndarray:
    """``positions`` with the bits where ``flip`` is true inverted (``z <- 1 - z``)."""
    out = np.where(flip, 1.0 - positions, positions)
    # 1 - 0.5 = 0.5 decodes like 0.5: push it to the side the flip asks for.
    stuck = flip & (out == THRESHOLD)
    if stuck.any():
        out[stuck] = 0.75
    return out


# ---------------------------------------------------------------------------- sparrow search
class SparrowSearch:
    """Sparrow search (Xue and Shen 2020) for minimisation on ``[0, 1]^dimension``, ask/tell.

    **The paper's equations** (docs/methods.md, section ssa), with the population ranked by fitness
    at the start of an iteration, rank ``i = 1..N`` (1 = best), ``iter_max = iterations``
    and ``L`` a row of ones:

    * producers, the best ``PD = 20%``, with one alarm value ``R2 ~ U[0, 1]`` per
      iteration: ``x_i <- x_i exp(-i / (a iter_max))`` with ``a ~ U(0, 1]`` if
      ``R2 < ST`` (``ST = 0.8``), else ``x_i <- x_i + Q L`` with ``Q ~ N(0, 1)`` (Eq. 3);
    * scroungers, the others: ``x_i <- Q exp((x_worst - x_i) / i^2)`` if ``i > N / 2``,
      else ``x_i <- x_P + |x_i - x_P| A+ L`` with ``A`` a row of random ``+-1`` and
      ``A+ = A^T (A A^T)^-1 = A^T / d`` (Eq. 4);
    * scouts, ``SD = 10%`` of the sparrows drawn at random: ``x_i <- x_best + beta |x_i -
      x_best|`` (``beta ~ N(0, 1)``) if ``f_i > f_best``, else ``x_i <- x_i + K |x_i -
      x_worst| / (f_i - f_worst + eps)`` (``K ~ U[-1, 1]``) (Eq. 5);
    * a sparrow keeps its move only if its fitness improves (strictly).

    ``Q``, ``a``, ``beta`` and ``K`` are scalars drawn per sparrow and move (``Q L`` adds
    the same ``Q`` to every coordinate), as in the paper's matrix notation.

    **Our choices** where the paper is silent or loose:

    * ``PD = max(1, round(0.2 N))``, ``SD = max(1, round(0.1 N))``;
    * an iteration has two evaluation rounds: the producers move and are evaluated first,
      so that ``x_P`` in Eq. 4 is the best producer's position *after* their moves; then
      the scroungers and the scouts move together, with ``x_worst``, ``f_worst``,
      ``x_best`` and ``f_best`` the population's after the first round. A scout moves by
      Eq. 5 from its current position instead of its role's move (a producer drawn as a
      scout moves twice in the iteration);
    * positions are clipped to the box; a move that overflows (``exp`` in Eq. 4, the
      division in Eq. 5 when ``f_i = f_worst``) goes to the face it points to, and a NaN
      (``0 * inf``, or ``inf - inf`` between penalised fitness values) to 0;
    * the initial population is ``initial`` (rows beyond ``population`` compete: the best
      ``population`` rows are kept after their evaluation) filled with uniform random
      positions;
    * ``repair`` (cut vectors to cut vectors), if given, is applied to every position
      before it is asked for, and changed bits are mirrored back into the position.

    Parameters
    ----------
    dimension : int
        Number of coordinates ``d >= 1``.
    population : int
        ``N >= 2`` sparrows.
    iterations : int
        ``iter_max >= 1`` of Eq. 3 (the driver decides when to stop; :attr:`done` says
        when ``iterations`` have been completed).
    producers, scouts : float
        Fractions of the population (0.2 and 0.1 in the paper).
    safety_threshold : float
        ``ST`` (0.8 in the paper).
    initial : array of shape (k, dimension), optional
        Starting positions (seeds).
    repair : callable, optional
        ``repair(cuts) -> cuts`` on boolean matrices of cut vectors.
    rng : numpy.random.Generator, optional

    Examples
    --------
    Minimise the number of ones in the decoded bits of a 6-dimensional position:

    >>> search = SparrowSearch(6, population=10, iterations=20, rng=np.random.default_rng(1))
    >>> while not search.done:
    ...     positions = search.ask()
    ...     search.tell(decode(positions).sum(axis=1).astype(float))
    >>> search.best_fitness, search.n_iter
    (0.0, 20)
    """

    def __init__(
        self,
        dimension: int,
        *,
        population: int = 30,
        iterations: int = 100,
        producers: float = 0.2,
        scouts: float = 0.1,
        safety_threshold: float = 0.8,
        initial: np.ndarray | None = None,
        repair: Callable[[np.ndarray], np.ndarray] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, (int, np.integer)) or dimension < 1:
            raise ValueError(f"dimension must be an integer >= 1, got {dimension!r}")
        _check_int("population", population, 2)
        _check_int("iterations", iterations, 1)
        for label, value in (("producers", producers), ("scouts", scouts), ("safety_threshold", safety_threshold)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{label} must be a number in [0, 1], got {value!r}")
        self.dimension = int(dimension)
        self.population = int(population)
        self.iterations = int(iterations)
        self.safety_threshold = float(safety_threshold)
        self.num_producers = max(1, round(float(producers) * self.population))
        self.num_scouts = max(1, round(float(scouts) * self.population))
        self.rng = rng if rng is not None else np.random.default_rng()
        self.repair = repair
        if initial is None:
            initial = np.empty((0, self.dimension))
        initial = np.atleast_2d(np.asarray(initial, dtype=np.float64))
        if initial.shape[1] != self.dimension:
            raise ValueError(f"initial positions must have {self.dimension} columns, got shape {initial.shape}")
        self._initial = np.clip(initial, 0.0, 1.0)
        self.positions = np.empty((0, self.dimension))
        self.fitness = np.empty(0)
        self.best_position: np.ndarray | None = None
        self.best_fitness = math.inf
        self.n_iter = 0
        self.evaluations = 0
        self._phase = "init"
        self._asked: np.ndarray | None = None
        self._asked_rows: np.ndarray | None = None

    # ------------------------------------------------------------------ public protocol
    @property
    def done(self) -> bool:
        """True once ``iterations`` iterations are complete."""
        return self.n_iter >= self.iterations

    def ask(self) -> np.ndarray:
        """The positions to evaluate next, shape ``(k, dimension)``, in the box (read-only)."""
        if self._asked is not None:
            raise RuntimeError("tell() the fitness of the last ask() before asking again")
        positions, rows = self._propose()
        positions = self._repaired(positions)
        self._asked, self._asked_rows = positions, rows
        view = positions.view()
        view.flags.writeable = False
        return view

    def tell(self, fitness: np.ndarray) -> None:
        """The fitness (to minimise) of the positions of the last :meth:`ask`, in order."""
        if self._asked is None:
            raise RuntimeError("tell() needs a preceding ask()")
        fitness = np.asarray(fitness, dtype=np.float64).reshape(-1)
        if fitness.shape != (len(self._asked),):
            raise ValueError(f"expected {len(self._asked)} fitness values, got {fitness.shape[0]}")
        if np.isnan(fitness).any():
            raise ValueError("fitness values must not be NaN (use +inf for infeasible positions)")
        positions, rows = self._asked, self._asked_rows
        self._asked = self._asked_rows = None
        self.evaluations += len(fitness)
        if len(fitness):
            k = int(np.argmin(fitness))
            if fitness[k] < self.best_fitness:
                self.best_fitness = float(fitness[k])
                self.best_position = positions[k].copy()
        self._accept(positions, rows, fitness)

    # ------------------------------------------------------------------ phases
    def _propose(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self._phase == "init":
            missing = max(0, self.population - len(self._initial))
            return np.vstack([self._initial, self._random_positions(missing)]), None
        if self._phase == "producers":
            moved, rows = self._producer_moves()
        elif self._phase == "followers":
            moved, rows = self._follower_moves()
        else:
            raise RuntimeError(f"unknown phase {self._phase!r}")
        return np.clip(moved, 0.0, 1.0), rows

    def _accept(self, positions: np.ndarray, rows: np.ndarray | None, fitness: np.ndarray) -> None:
        if self._phase == "init":
            keep = np.argsort(fitness, kind="stable")[: self.population]
            self.positions, self.fitness = positions[keep].copy(), fitness[keep].copy()
            self._phase = "producers"
            return
        better = fitness < self.fitness[rows]
        self.positions[rows[better]] = positions[better]
        self.fitness[rows[better]] = fitness[better]
        if self._phase == "producers":
            self._phase = "followers"
        else:
            self._end_sparrow_rounds()

    def _end_sparrow_rounds(self) -> None:
        self._end_iteration()

    def _end_iteration(self) -> None:
        self.n_iter += 1
        self._phase = "producers"

    def _random_positions(self, count: int) -> np.ndarray:
        return self.rng.random((count, self.dimension))

    # ------------------------------------------------------------------ the paper's moves
    def _producer_moves(self) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.fitness, kind="stable")
        self.positions, self.fitness = self.positions[order], self.fitness[order]
        rows = np.arange(self.num_producers)
        x = self.positions[rows]
        rank = rows + 1.0
        alarm = self.rng.random()                          # R2, one per iteration
        if alarm < self.safety_threshold:
            a = 1.0 - self.rng.random(len(rows))           # U(0, 1]
            moved = x * np.exp(-rank / (a * self.iterations))[:, None]
        else:
            q = self.rng.standard_normal(len(rows))
            moved = x + q[:, None]
        return moved, rows

    def _follower_moves(self) -> tuple[np.ndarray, np.ndarray]:
        n, d = self.population, self.dimension
        scouts = np.sort(self.rng.choice(n, size=min(self.num_scouts, n), replace=False))
        scroungers = np.setdiff1d(np.arange(self.num_producers, n), scouts)
        best_producer = int(np.argmin(self.fitness[: self.num_producers]))
        x_producer = self.positions[best_producer]
        worst = int(np.argmax(self.fitness))
        best = int(np.argmin(self.fitness))
        x_worst, f_worst = self.positions[worst], self.fitness[worst]
        x_best, f_best = self.positions[best], self.fitness[best]
        moved = np.empty((len(scroungers) + len(scouts), d))
        for k, i in enumerate(scroungers.tolist()):
            x = self.positions[i]
            rank = i + 1
            if rank > n / 2:
                q = self.rng.standard_normal()
                with np.errstate(over="ignore"):
                    moved[k] = q * np.exp((x_worst - x) / rank**2)
            else:
                signs = self.rng.choice((-1.0, 1.0), size=d)
                moved[k] = x_producer + float(np.abs(x - x_producer) @ signs) / d
        for k, i in enumerate(scouts.tolist(), start=len(scroungers)):
            x, f = self.positions[i], self.fitness[i]
            if f > f_best:
                beta = self.rng.standard_normal()
                moved[k] = x_best + beta * np.abs(x - x_best)
            else:
                factor = self.rng.uniform(-1.0, 1.0)
                with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                    moved[k] = x + factor * np.abs(x - x_worst) / (f - f_worst + _EPSILON)
        moved = np.nan_to_num(moved, nan=0.0, posinf=1.0, neginf=0.0)
        return moved, np.concatenate([scroungers, scouts])

    # ------------------------------------------------------------------ repair
    def _repaired(self, positions: np.ndarray) -> np.ndarray:
        if self.repair is None or not len(positions):
            return positions
        cuts = decode(positions)
        fixed = self.repair(cuts)
        changed = fixed != cuts
        if changed.any():
            positions = _mirror(positions, changed)
        return positions


class GradSSA(SparrowSearch):
    """Our sparrow search for tensor fusion: :class:`SparrowSearch` plus a local search.

    GradSSA (Gao et al. 2023) improves sparrow search for tensor fusion, but its changes
    are not public (docs/methods.md, section ssa). **Every choice below is ours:**

    * **encoding**: the threshold encoding of the module docstring, so the paper's moves
      (Eqs. 3 to 5, :class:`SparrowSearch`) apply unchanged, with greedy acceptance;
    * **seeding**: the solver passes the baselines' plans and random plans as ``initial``
      (:func:`gradssa`);
    * **mutation of the best (a memetic step)**: after the sparrows' two rounds, each
      iteration improves one sparrow by local search over cut vectors, with greedy
      (strictly improving, best-in-batch) acceptance, and writes the result back into
      its position (Lamarckian) by mirroring the changed bits. The moves are
      ``N1``: flip one cut (merge two neighbouring messages, or split one) and shift one
      cut by one position (move a boundary tensor to the neighbouring message), ``2n``
      plans at most; and ``N2``: flip any two cuts (move a cut anywhere, merge or split
      twice), ``n^2 / 2`` plans, scored in blocks of at most 2^22 position entries (the
      first block with an improvement is taken). Variable neighbourhood descent: ``N1``
      until it fails, then ``N2``, back to ``N1`` after an ``N2`` move, until neither
      improves: a local optimum of ``N1 + N2``;
    * **which sparrow**: the best-ranked one that is not a known local optimum (local
      optima are remembered by their cut vector); when all are, a copy of the best with
      ``kick`` bits flipped (a kick out of the ``N2`` basin, as in iterated local search)
      is descended instead and replaces the worst sparrow if it ends better. Each kicked
      bit is, with probability 1/2, one of the best plan's cuts (when it has any), else a
      uniformly random position, so that kicks remove boundaries as often as they add
      them (few-message optima are otherwise rarely left: 99.3% instead of 99.0% of our
      zoo instances at the DP optimum);
    * **sampled mode** (``neighbours = k``, used when plans are simulated one by one):
      each iteration scores ``k`` random neighbours of the best sparrow (one or two bits
      flipped, each with probability 1/2) and moves it to the best if it improves: one
      step per iteration, no local-optimum bookkeeping.

    Parameters
    ----------
    dimension, population, iterations, producers, scouts, safety_threshold, initial, repair, rng
        As in :class:`SparrowSearch`.
    neighbours : int, optional
        ``None``: full descents; an integer: the sampled mode with that many neighbours.
    kick : int
        Bits flipped by a kick (0: no kicks).

    Examples
    --------
    >>> search = GradSSA(6, population=4, iterations=3, rng=np.random.default_rng(1))
    >>> while not search.done:
    ...     positions = search.ask()
    ...     search.tell(decode(positions).sum(axis=1).astype(float))
    >>> search.best_fitness
    0.0
    """

    def __init__(
        self,
        dimension: int,
        *,
        population: int = 10,
        iterations: int = 40,
        neighbours: int | None = None,
        kick: int = 3,
        **options: Any,
    ) -> None:
        super().__init__(dimension, population=population, iterations=iterations, **options)
        if neighbours is not None:
            _check_int("neighbours", neighbours, 1)
        _check_int("kick", kick, 0)
        self.neighbours = None if neighbours is None else int(neighbours)
        self.kick = int(kick)
        self.local_optima: set[bytes] = set()
        self.descents = 0
        self.kicks = 0
        # Descent state: the position being improved, its fitness, which sparrow it is
        # (-1: a kicked copy), the neighbourhood level and the next block of it.
        self._current: np.ndarray | None = None
        self._current_fitness = math.inf
        self._target = -1
        self._level = 1
        self._moves: tuple[np.ndarray, np.ndarray] | None = None
        self._block_start = 0

    # ------------------------------------------------------------------ phases
    def _propose(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self._phase == "kick":
            start = self.positions[int(np.argmin(self.fitness))]
            cuts = np.flatnonzero(decode(start))
            flip = np.zeros(self.dimension, dtype=bool)
            for _ in range(self.kick):
                if len(cuts) and self.rng.random() < 0.5:
                    flip[cuts[self.rng.integers(len(cuts))]] = True
                else:
                    flip[self.rng.integers(self.dimension)] = True
            return _mirror(start, flip)[None, :], None
        if self._phase == "descent":
            first, second = self._moves
            stop = min(len(first), self._block_start + self._block_rows())
            return self._neighbours(first[self._block_start: stop], second[self._block_start: stop]), None
        if self._phase == "sample":
            first, second = self._sampled_moves()
            return self._neighbours(first, second), None
        return super()._propose()

    def _accept(self, positions: np.ndarray, rows: np.ndarray | None, fitness: np.ndarray) -> None:
        if self._phase == "kick":
            self.kicks += 1
            self._start_descent(positions[0], float(fitness[0]), target=-1)
        elif self._phase == "descent":
            self._descent_step(positions, fitness)
        elif self._phase == "sample":
            k = int(np.argmin(fitness))
            best = int(np.argmin(self.fitness))
            if fitness[k] < self.fitness[best]:
                self.positions[best], self.fitness[best] = positions[k], fitness[k]
            self._end_iteration()
        else:
            super()._accept(positions, rows, fitness)

    def _end_sparrow_rounds(self) -> None:
        if self.neighbours is not None:
            self._phase = "sample"
            return
        for i in np.argsort(self.fitness, kind="stable").tolist():
            if np.isfinite(self.fitness[i]) and _key(self.positions[i]) not in self.local_optima:
                self._start_descent(self.positions[i], float(self.fitness[i]), target=i)
                return
        if self.kick > 0:
            self._phase = "kick"
        else:
            self._end_iteration()

    # ------------------------------------------------------------------ local search
    def _start_descent(self, position: np.ndarray, fitness: float, target: int) -> None:
        self.descents += 1
        self._current, self._current_fitness, self._target = position.copy(), fitness, target
        self._open_level(1)

    def _open_level(self, level: int) -> None:
        """Enter neighbourhood ``level`` of the current position, or finish the descent."""
        while level <= 2:
            self._level, self._block_start = level, 0
            self._moves = self._level_moves(level)
            if len(self._moves[0]):
                self._phase = "descent"
                return
            level += 1
        self._finish_descent()

    def _level_moves(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Bits to flip per neighbour: ``(first, second)``, ``second = -1`` for one flip."""
        d = self.dimension
        if level == 1:
            cuts = decode(self._current)
            shifts = np.flatnonzero(cuts[:-1] != cuts[1:])
            first = np.concatenate([np.arange(d), shifts])
            second = np.concatenate([np.full(d, -1), shifts + 1])
            return first, second
        first, second = np.triu_indices(d, 1)
        return first, second

    def _block_rows(self) -> int:
        return max(1, _BLOCK_ENTRIES // self.dimension)

    def _neighbours(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        base = self._current if self._phase == "descent" else self.positions[int(np.argmin(self.fitness))]
        flipped = _mirror(base, np.ones(self.dimension, dtype=bool))
        out = np.repeat(base[None, :], len(first), axis=0)
        rows = np.arange(len(first))
        out[rows, first] = flipped[first]
        two = second >= 0
        out[rows[two], second[two]] = flipped[second[two]]
        return out

    def _descent_step(self, positions: np.ndarray, fitness: np.ndarray) -> None:
        k = int(np.argmin(fitness))
        if fitness[k] < self._current_fitness:
            self._current, self._current_fitness = positions[k].copy(), float(fitness[k])
            self._open_level(1)
            return
        self._block_start += len(fitness)
        if self._block_start < len(self._moves[0]):
            return                                  # the next block of this level
        self._open_level(self._level + 1)

    def _finish_descent(self) -> None:
        self.local_optima.add(_key(self._current))
        if self._target >= 0:
            self.positions[self._target] = self._current
            self.fitness[self._target] = self._current_fitness
        else:
            worst = int(np.argmax(self.fitness))
            if self._current_fitness < self.fitness[worst]:
                self.positions[worst] = self._current
                self.fitness[worst] = self._current_fitness
        self._current, self._moves = None, None
        self._end_iteration()

    def _sampled_moves(self) -> tuple[np.ndarray, np.ndarray]:
        d, k = self.dimension, self.neighbours
        first = self.rng.integers(0, d, size=k)
        second = np.full(k, -1)
        if d > 1:
            pair = self.rng.random(k) < 0.5
            offset = self.rng.integers(1, d, size=k)          # a different second bit
            second[pair] = (first[pair] + offset[pair]) % d
        codes = np.unique(np.stack([np.minimum(first, np.where(second < 0, d, second)),
                                    np.where(second < 0, -1, np.maximum(first, second))], axis=1), axis=0)
        return codes[:, 0], codes[:, 1]


def _key(position: np.ndarray) -> bytes:
    return np.packbits(decode(position)).tobytes()


# ---------------------------------------------------------------------------- solvers
@method("ssa", family="search",
        summary="sparrow search (Xue and Shen 2020) over cut vectors",
        in_default_comparison=False)
def ssa(
    problem: Problem,
    *,
    population: int = 30,
    iterations: int = 100,
    time_limit: float | None = None,
    rng: int | np.random.Generator | None = None,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
) -> Result:
    """Sparrow search (Xue and Shen 2020) over fusion cut vectors: :class:`SparrowSearch`.

    The paper's algorithm on the threshold encoding of the module docstring, seeded with
    WFBP (every cut) and the single message (no cut), the rest of the population uniform
    random positions (our choice). The best plan ever evaluated is returned; it is never
    worse than the better seed (the seeds are evaluated first, and the final plan is the
    better of the search's and the best seed's by simulated ``T``).

    Parameters
    ----------
    population : int
        Sparrows, ``>= 2``.
    iterations : int
        Iterations (``iter_max``), ``>= 1``; each evaluates about ``population`` plans.
    time_limit : float, optional
        Seconds; checked between iterations only, so a fixed ``rng`` gives the same result
        whenever the limit is not reached. Status ``TIME_LIMIT`` when it stops the search.
    rng : None, int or numpy.random.Generator
        Seed or generator; ``None`` draws a fresh seed, recorded in ``stats["rng_seed"]``.
    max_message_bytes, max_messages : optional
        Caps as in :func:`fusionopt.solvers.exact.dp` (byte cap repaired, message count
        penalised; module docstring).

    Returns
    -------
    Result
        ``stats``: ``history`` (best ``T`` in seconds after the initial population and
        after each iteration), ``history_evaluations`` and ``history_seconds`` (cumulative
        evaluations and elapsed seconds at the same points), ``evaluations``,
        ``iterations`` (completed), ``population``, ``seeds`` (seed name -> the ``T`` of
        its plan, repaired for the caps; ``inf`` if it has too many messages),
        ``best_seed``, ``rng_seed`` (``None`` when a Generator was passed).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms`` (the optimum is 17 ms):

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = ssa(Problem(profile, AlphaBeta(3e-3, 1e-9)), population=10, iterations=10, rng=0)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), result.stats["seeds"]["single"] * 1e3
    ([[2], [1, 0]], 17.0, 19.0)
    """
    started = time.perf_counter()
    _check_int("population", population, 2)
    _check_int("iterations", iterations, 1)
    generator, rng_seed = _generator(rng)
    setting = _Setting(problem, max_message_bytes, max_messages)
    d = problem.profile.n - 1
    if d == 0:
        return setting.trivial("ssa", started, rng_seed)
    seeds = {"wfbp": np.ones(d, dtype=bool), "single": np.zeros(d, dtype=bool)}
    seed_cuts = setting.repair_all(np.array(list(seeds.values())))
    algorithm = SparrowSearch(d, population=population, iterations=iterations, initial=encode(seed_cuts),
                              repair=setting.repair, rng=generator)
    return setting.run("ssa", algorithm, dict(zip(seeds, seed_cuts)), started, rng_seed)


@method("gradssa", family="search",
        summary="our sparrow search for fusion: seeded, with local search",
        in_default_comparison=False)
def gradssa(
    problem: Problem,
    *,
    population: int = 10,
    iterations: int = 40,
    time_limit: float | None = None,
    rng: int | np.random.Generator | None = None,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
    neighbours: int | None = None,
    kick: int = 3,
) -> Result:
    """GradSSA, our sparrow search for tensor fusion (:class:`GradSSA`; all choices ours).

    The population starts from the plans of the baselines ``wfbp``, ``single``,
    ``threshold``, ``ddp``, ``horovod`` and ``mgwfbp`` (default options, solved as
    warm starts, repaired for the caps) and random plans: each draws a cut density ``p ~
    U(0, 1)`` (``U(0, (K - 1) / (n - 1))`` under ``max_messages = K``) and cuts each
    position with probability ``p``, so that plans of few and of many messages both
    appear. Each iteration moves the sparrows by the paper's equations, then improves
    one sparrow by a local search (a descent to a local optimum of the one- and two-cut
    moves, see :class:`GradSSA`). The best plan ever evaluated is returned, never worse
    than the best seed (checked by simulated ``T`` at the end).

    On the plain model the defaults reach the DP optimum on 99.3% of 864 runs (the four
    zoo models on the h100, a100 and v100 presets, batch 64, six network presets, 2 to
    16 workers, three seeds), with a largest gap of 0.003% (our measurement, not a
    test: tests never assert times). One iteration may take a full descent of ``O(n)``
    steps of ``O(n^2)`` plans each, so ``time_limit`` can be overrun by one iteration. A
    seed whose solve grows with ``n^2`` (MG-WFBP) is skipped when its estimated time
    (:data:`QUADRATIC_SEED_SECONDS` ``* n^2``) exceeds ``time_limit`` (``stats["seeds_skipped"]``).

    Parameters
    ----------
    population, iterations, time_limit, rng, max_message_bytes, max_messages
        As in :func:`ssa`.
    neighbours : int, optional
        ``None``: full descents on one channel; with ``channels > 1``, where every plan is
        simulated, ``32`` sampled neighbours of the best sparrow per iteration (one step).
        An integer forces the sampled mode with that many neighbours.
    kick : int
        Bits flipped in a copy of the best sparrow when every sparrow is a known local
        optimum (0: no kicks).

    Returns
    -------
    Result
        ``stats`` as :func:`ssa`, plus ``descents``, ``kicks`` and ``neighbours`` (the mode
        used).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``: MG-WFBP's seed is 19 ms, the optimum 17 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = gradssa(Problem(profile, AlphaBeta(3e-3, 1e-9)), population=8, iterations=2, rng=0)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), str(result.status)
    ([[2], [1, 0]], 17.0, 'OPTIMAL')
    >>> round(result.stats["seeds"]["mgwfbp"] * 1e3, 9)
    19.0
    """
    started = time.perf_counter()
    _check_int("population", population, 2)
    _check_int("iterations", iterations, 1)
    if neighbours is not None:
        _check_int("neighbours", neighbours, 1)
    _check_int("kick", kick, 0)
    generator, rng_seed = _generator(rng)
    setting = _Setting(problem, max_message_bytes, max_messages)
    d = problem.profile.n - 1
    if d == 0:
        return setting.trivial("gradssa", started, rng_seed)
    if neighbours is None and problem.channels > 1:
        neighbours = SAMPLED_NEIGHBOURS
    profile = problem.profile
    seeds, skipped = [], []
    for name in GRADSSA_SEEDS:
        if time_limit is not None and name in QUADRATIC_SEEDS and QUADRATIC_SEED_SECONDS * d * d > time_limit:
            skipped.append(name)      # it would take the whole limit (MG-WFBP: 1.4 s for n = 604)
            continue
        seeds.append((name, warm.start(problem, name).plan.without_release()))
    seeds = [(name, plan) for name, plan in seeds if plan.is_fusion(profile)]   # DDP over dtypes may not be
    seed_names = [name for name, _ in seeds]
    seed_cuts = setting.repair_all(np.array([plan.cuts(profile) for _, plan in seeds]))
    count = max(0, population - len(seed_cuts))
    top = 1.0 if setting.max_messages is None else min(1.0, (setting.max_messages - 1) / d)
    density = generator.uniform(0.0, top, size=(count, 1))
    random_cuts = generator.random((count, d)) < density
    margin = 0.5 * (1.0 - generator.random((count, d)))        # (0, 0.5]
    random_positions = np.where(random_cuts, THRESHOLD + margin, THRESHOLD - margin)
    algorithm = GradSSA(d, population=population, iterations=iterations, neighbours=neighbours, kick=kick,
                        initial=np.vstack([encode(seed_cuts), random_positions]),
                        repair=setting.repair, rng=generator)
    return setting.run("gradssa", algorithm, dict(zip(seed_names, seed_cuts)), started, rng_seed,
                       extra=lambda: {"descents": algorithm.descents, "kicks": algorithm.kicks,
                                      "neighbours": "all" if neighbours is None else neighbours,
                                      "seeds_skipped": skipped})


# ---------------------------------------------------------------------------- shared driver
class _Setting:
    """A problem with its caps: repair, objective, driver loop and the final checks."""

    def __init__(self, problem: Problem, max_message_bytes: float | None, max_messages: int | None) -> None:
        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
        self.problem = problem
        self.cap, self.max_messages = check_caps(problem, max_message_bytes, max_messages)
        _, self.prefix = backward_arrays(problem)

    # ------------------------------------------------------------------ caps
    def repair_all(self, cuts: np.ndarray) -> np.ndarray:
        return cuts if self.cap == math.inf else self._repair_bytes(cuts)

    @property
    def repair(self) -> Callable[[np.ndarray], np.ndarray] | None:
        return None if self.cap == math.inf else self._repair_bytes

    def _repair_bytes(self, cuts: np.ndarray) -> np.ndarray:
        # Scan backward order; close the open message before a tensor that would overflow.
        out = np.array(cuts, dtype=bool, copy=True)
        prefix = self.prefix
        start = np.zeros(len(out))                 # Q at the open message's start
        for j in range(out.shape[1]):
            overflow = prefix[j + 2] - start > self.cap
            out[:, j] |= overflow
            start = np.where(out[:, j], prefix[j + 1], start)
        return out

    def objective(self, positions: np.ndarray) -> np.ndarray:
        cuts = decode(positions)
        times = score_cuts(self.problem, cuts)
        if self.max_messages is not None:
            times[cuts.sum(axis=1) + 1 > self.max_messages] = np.inf
        return times

    def feasible(self, plan: Plan) -> bool:
        sizes = plan.message_bytes
        return bool(sizes.max() <= self.cap
                    and (self.max_messages is None or len(sizes) <= self.max_messages))

    # ------------------------------------------------------------------ driver
    def run(self, method: str, algorithm: SparrowSearch, seeds: dict[str, np.ndarray], started: float,
            rng_seed: int | None, extra: Callable[[], dict] | None = None) -> Outcome:
        """Run ``algorithm`` until it is done or the solve's deadline passes (checked between
        iterations)."""
        seed_times = self.objective(encode(np.array(list(seeds.values()))))
        history, history_evaluations, history_seconds = [], [], []

        def record() -> None:
            history.append(algorithm.best_fitness)
            history_evaluations.append(algorithm.evaluations)
            history_seconds.append(time.perf_counter() - started)

        stopped = interrupted = False
        try:
            algorithm.tell(self.objective(algorithm.ask()))        # the initial population
            record()
            while not algorithm.done:
                if time.perf_counter() >= solve_deadline():
                    stopped = True
                    break
                target = algorithm.n_iter + 1
                while algorithm.n_iter < target:
                    algorithm.tell(self.objective(algorithm.ask()))
                record()
        except KeyboardInterrupt:
            # Ctrl-C: the best position told so far (one assignment, so never half-made),
            # or the best seed before the first tell, is judged below like any result.
            interrupted = True
        profile = self.problem.profile
        best_seed = list(seeds)[int(np.argmin(seed_times))]
        seed_plan = Plan.from_cuts(profile, seeds[best_seed])
        found = algorithm.best_position
        plan = seed_plan if found is None else Plan.from_cuts(profile, decode(found))
        if self.feasible(seed_plan) and (
                simulate(self.problem, seed_plan, validate=False).iteration_time
                < simulate(self.problem, plan, validate=False).iteration_time):
            plan = seed_plan            # rounding between the fast scorer and simulate
        if not self.feasible(plan):
            raise AssertionError(f"{method}: the best plan breaks the caps")
        stats = {
            "history": tuple(history),
            "history_evaluations": tuple(history_evaluations),
            "history_seconds": tuple(history_seconds),
            "evaluations": algorithm.evaluations,
            "iterations": algorithm.n_iter,
            "seeds": {name: float(t) for name, t in zip(seeds, seed_times)},
            "best_seed": best_seed,
            "rng_seed": rng_seed,
            "population": algorithm.population,
        }
        if extra is not None:
            stats.update(extra())
        if interrupted:
            raise Interrupted(Outcome(plan, stats=stats, status=Status.INTERRUPTED)) from None
        return Outcome(plan, stats=stats, status=Status.TIME_LIMIT if stopped else Status.FEASIBLE)

    def trivial(self, method: str, started: float, rng_seed: int | None) -> Outcome:
        """One tensor: the only plan is one message."""
        plan = Plan.from_groups(self.problem.profile, [[0]])
        t = simulate(self.problem, plan).iteration_time
        stats = {"history": (t,), "history_evaluations": (0,), "history_seconds": (time.perf_counter() - started,),
                 "evaluations": 0, "iterations": 0, "seeds": {"single": t}, "best_seed": "single",
                 "rng_seed": rng_seed}
        return Outcome(plan, stats=stats)


# ---------------------------------------------------------------------------- validation
def _check_int(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{label} must be an integer >= {minimum}, got {value!r}")


def _generator(rng: Any) -> tuple[np.random.Generator, int | None]:
    """The generator for ``rng`` and the seed that reproduces it (``None`` for a Generator)."""
    if isinstance(rng, np.random.Generator):
        return rng, None
    if rng is None:
        seed = int(np.random.SeedSequence().entropy)
        return np.random.default_rng(seed), seed
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)) or rng < 0:
        raise ValueError(f"rng must be None, a non-negative int seed or a numpy.random.Generator, got {rng!r}")
    return np.random.default_rng(int(rng)), int(rng)
