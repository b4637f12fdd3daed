"""The run's work items, handed out to the cards that ask for them.

A *chunk* is a few pairs of one family (:func:`matprobe.run.runner._chunks`);
each is claimed in the store just before it is handed out, so concurrent runs on
one store share the work, and what another live run holds is waited for at the
end and taken from the store (or taken over once that run is gone).

Each card is handed, where it can be, more of the spec it measured last, and
otherwise a spec no other card is on. A spec's timing bench (its rotated input
sets and the producer's and baseline's recordings, :mod:`~matprobe.measure.bench`)
is built once in each worker that measures the spec: two H100s dealt the chunks
in turn each built most specs' benches, and a card switched spec every 3.3
pairs instead of 4 (0.53 s a pair instead of one card's 0.50; BENCHMARKS.md).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from matprobe.measure.results import PairResult
from matprobe.run.store import ResultKey, ResultStore
from matprobe.run.task import Task

#: Chunks from the front of the queue a card may take instead of the first, to
#: stay on its spec or keep off another card's.
AFFINITY_LOOKAHEAD = 16
#: How often a run waiting for pairs another run holds looks at the store (s).
CLAIM_POLL_S = 0.5

#: A chunk's pairs: (the caller's index of the pair, its result key, its spec key).
Chunk = Sequence[tuple[int, ResultKey | None, str]]


class WorkQueue:
    """Hands out ``chunks`` (lists of ``(index, key, spec_key)``, most work first) as
    task lists: ``take(card)``. ``tasks_of(indices)`` makes the tasks of pairs this
    run claimed (grouped by family); ``on_shared(index, result)`` is told of a pair
    another run measured while this one waited for it; ``earlier`` is what the store
    held for the pairs before the run started (a row still equal to it is not news)."""

    def __init__(
        self,
        chunks: Sequence[Chunk],
        store: ResultStore,
        run_id: int,
        tasks_of: Callable[[Sequence[int]], list[list[Task]]],
        on_shared: Callable[[int, PairResult], None],
        earlier: dict[ResultKey, PairResult],
    ) -> None:
        self._pending = [list(chunk) for chunk in chunks]
        self._waiting: list[tuple[int, ResultKey]] = []
        self._ready: deque[list[Task]] = deque()
        self._store, self._run_id = store, run_id
        self._tasks_of, self._on_shared, self._earlier = tasks_of, on_shared, earlier
        #: the spec each card was handed last
        self._spec_of: dict[int, str] = {}
        #: pairs found measured by another run when this one claimed them
        self._done: set[ResultKey] = set()

    def take(self, card: int = 0) -> list[Task] | None:
        """The next task list for ``card`` (None: nothing is left)."""
        while True:
            if self._ready:
                tasks = self._ready.popleft()
                self._spec_of[card] = tasks[-1].spec.key()
                return tasks
            if self._pending:
                self._claim(self._pending.pop(self._pick(card)))
            elif self._waiting:
                self._poll_waiting()
            else:
                return None

    def _pick(self, card: int) -> int:
        """The chunk for ``card``: its spec's, else one no other card is on, else the first."""
        window = self._pending[:AFFINITY_LOOKAHEAD]
        spec = [chunk[0][2] for chunk in window]
        mine = self._spec_of.get(card)
        if mine in spec:
            return spec.index(mine)
        others = {s for c, s in self._spec_of.items() if c != card}
        return next((i for i, s in enumerate(spec) if s not in others), 0)

    def _claim(self, chunk: Chunk) -> None:
        keys = [key for _, key, _ in chunk if key is not None]
        mine = self._take(keys, [i for i, key, _ in chunk if key is not None])
        self._ready.extend(self._tasks_of([i for i, key, _ in chunk if key is None or key in mine]))
        self._waiting += [
            (i, key)
            for i, key, _ in chunk
            if key is not None and key not in mine and key not in self._done
        ]

    def _take(self, keys: Sequence[ResultKey], indices: Sequence[int]) -> set[ResultKey]:
        """The keys this run claims and is to measure. A claim succeeds once its holder
        has ended, so a pair another run measured and released since this run's plan
        is claimed too: its stored row is taken instead of measuring it again."""
        mine = self._store.claim(keys, self._run_id)
        found = self._store.get_many([key for key in keys if key in mine])
        for index, key in zip(indices, keys, strict=True):
            result = found.get(key)
            if key in mine and result is not None and result != self._earlier.get(key):
                self._on_shared(index, result)
                mine.discard(key)
                self._done.add(key)
        return mine

    def _poll_waiting(self) -> None:
        """Take what other runs finished; claim what no live run holds any more (it
        ended, or died); wait a little when neither happened."""
        found = self._store.get_many([key for _, key in self._waiting])
        still = []
        for index, key in self._waiting:
            result = found.get(key)
            if result is not None and result != self._earlier.get(key):
                self._on_shared(index, result)
            else:
                still.append((index, key))
        taken = self._take([key for _, key in still], [i for i, _ in still])
        self._ready.extend(self._tasks_of([i for i, key in still if key in taken]))
        self._waiting = [(i, key) for i, key in still if key not in taken | self._done]
        if self._waiting and not taken:
            time.sleep(CLAIM_POLL_S)
