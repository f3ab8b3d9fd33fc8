"""Moves files along their routes over an `Executor`, at most `window` files at a time.

Each `step()` admits files up to the window, dispatches every call that is ready to an idle worker (later
stages first: finishing files frees memory before new ones are decoded), collects the calls that finished,
fails the calls that ran past the timeout, and returns the files whose last stage is done. The results stay
with the executor (Ray's object store) until the writer fetches them: audio and frames never pass the driver.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mediaindex.errors import MediaIndexError, StageError, reason_of
from mediaindex.pipeline.executor import Executor, Task
from mediaindex.pipeline.plan import Plan
from mediaindex.pipeline.route import Route
from mediaindex.pipeline.stages.registry import StageName

POLL = 0.5  # seconds `step` waits for a call to finish


class IngestStalled(MediaIndexError):
    """Files wait for a stage none of whose workers is busy or free: its pool lost its workers."""


@dataclass(eq=False)
class Flight:
    """A file on its route: where each branch is and what the finished ones gave."""

    plan: Plan
    route: Route
    start: Callable[[], Any]  # its first input: the path, or for a route without branches the item
    branch_at: list[int] = field(default_factory=list)
    branch_results: list[Any] = field(default_factory=list)  # the last result of each finished branch
    then_at: int = 0
    tasks: set[Task] = field(default_factory=set)
    busy: list[tuple[StageName, float]] = field(default_factory=list)  # (stage, seconds) of finished calls


@dataclass
class Finished:
    plan: Plan
    results: list[Any]  # to fetch and merge; empty when it failed
    error: StageError | None = None
    busy: list[tuple[StageName, float]] = field(default_factory=list)


@dataclass
class SchedulerHooks:
    # (plan, True) when a stage call on a file starts and none was running; (plan, False) when its last running
    # call ended and it waits for the next stage (or the writer).
    on_work: Callable[[Plan, bool], None] = lambda plan, working: None
    on_dispatch: Callable[[StageName, str], None] = lambda stage, path: None


class Scheduler:
    def __init__(self, executor: Executor[Any], order: Sequence[StageName], window: int, timeout: float,
                 hooks: SchedulerHooks | None = None) -> None:
        self.executor, self.window, self.timeout = executor, window, timeout
        self.hooks = hooks or SchedulerHooks()
        self.order = list(reversed(order))  # dispatch order: later stages first
        self.pending: deque[Flight] = deque()
        self.flying: list[Flight] = []
        self.ready: dict[StageName, deque[tuple[Flight, tuple[Any, ...]]]] = {s: deque() for s in order}
        self.running: dict[Task, Flight] = {}
        self.finished: list[Finished] = []

    def add(self, plan: Plan, route: Route, start: Callable[[], Any]) -> None:
        self.pending.append(Flight(plan, route, start))

    @property
    def done(self) -> bool:
        return not self.pending and not self.flying

    def step(self) -> list[Finished]:
        self._admit()
        self._dispatch()
        starting = self.executor.starting()
        self._collect(self.executor.wait(list(self.running), POLL) if self.running or starting else [])
        self._expire()
        finished, self.finished = self.finished, []
        return finished

    def in_flight(self) -> list[tuple[Task, Plan]]:
        """The calls running now, each with its file's plan."""
        return [(task, flight.plan) for task, flight in self.running.items()]

    def stop(self) -> list[Plan]:
        """Drop every call and queued file (the run stops); returns the plans that were in flight."""
        for task in self.running:
            self.executor.cancel(task)
        for flight in self.flying:
            if flight.tasks:
                self.hooks.on_work(flight.plan, False)
            flight.tasks.clear()
        stopped = [f.plan for f in self.flying]
        self.running.clear()
        self.flying.clear()
        self.pending.clear()
        for queue in self.ready.values():
            queue.clear()
        return stopped

    def _admit(self) -> None:
        while self.pending and len(self.flying) < self.window:
            flight = self.pending.popleft()
            self.flying.append(flight)
            try:
                first = flight.start()
            except Exception as exc:  # e.g. the index cannot be read: this file fails, the run goes on
                self._fail(flight, StageError(reason_of(exc)))
                continue
            route = flight.route
            flight.branch_at = [0] * len(route.branches)
            flight.branch_results = [None] * len(route.branches)
            for branch in route.branches:
                self.ready[branch[0]].append((flight, (first,)))
            if not route.branches:
                self._then(flight, (first,))

    def _dispatch(self) -> None:
        for stage in self.order:
            queue = self.ready[stage]
            while queue and self.executor.idle(stage):
                flight, inputs = queue.popleft()
                task = self.executor.submit(stage, inputs)
                self.running[task] = flight
                if not flight.tasks:
                    self.hooks.on_work(flight.plan, True)
                flight.tasks.add(task)
                self.hooks.on_dispatch(stage, flight.plan.path)
        if self.flying and not self.running and any(self.ready.values()) and not self.executor.starting():
            waiting = sorted({s.value for s, q in self.ready.items() if q})
            raise IngestStalled(f"ingest stalled: no worker of the {', '.join(waiting)} stage is available")

    def _collect(self, tasks: list[Task]) -> None:
        for task in tasks:
            flight = self.running.pop(task, None)
            if flight is None:  # dropped meanwhile with its file
                continue
            flight.tasks.discard(task)
            flight.busy.append((task.stage, time.monotonic() - task.started))
            if not flight.tasks:
                self.hooks.on_work(flight.plan, False)
            self._advance(flight, task)

    def _advance(self, flight: Flight, task: Task) -> None:
        """The next call after `task`: the branch's next stage, the merge into the route's `then`, or the end."""
        route = flight.route
        b = next((b for b, branch in enumerate(route.branches)
                  if flight.branch_results[b] is None and branch[flight.branch_at[b]] == task.stage), None)
        if b is not None:
            flight.branch_at[b] += 1
            if flight.branch_at[b] < len(route.branches[b]):
                self.ready[route.branches[b][flight.branch_at[b]]].append((flight, (task.result,)))
                return
            flight.branch_results[b] = task.result
            if any(r is None for r in flight.branch_results):
                return  # the other branches are still on their way
            self._then(flight, tuple(flight.branch_results))
            return
        flight.then_at += 1
        self._then(flight, (task.result,))

    def _then(self, flight: Flight, inputs: tuple[Any, ...]) -> None:
        """Send `inputs` to the route's next `then` stage (several are merged there), or finish the file."""
        if flight.then_at < len(flight.route.then):
            self.ready[flight.route.then[flight.then_at]].append((flight, inputs))
            return
        self.flying.remove(flight)
        self.finished.append(Finished(flight.plan, list(inputs), busy=flight.busy))

    def _expire(self) -> None:
        now = time.monotonic()
        for task, flight in list(self.running.items()):
            if task in self.running and now - task.started > self.timeout:
                del self.running[task]
                # A running call cannot be interrupted: its worker is restarted instead.
                self.executor.restart(task)
                flight.tasks.discard(task)
                if not flight.tasks:  # _fail reports the end of its work otherwise
                    self.hooks.on_work(flight.plan, False)
                self._fail(flight, StageError(f"timed out after {self.timeout:g} s in the {task.stage.value} stage"))

    def _fail(self, flight: Flight, error: StageError) -> None:
        """The file fails alone: its other calls are cancelled and its places in the queues given up."""
        for task in flight.tasks:
            self.running.pop(task, None)
            self.executor.cancel(task)
        if flight.tasks:
            self.hooks.on_work(flight.plan, False)
        flight.tasks.clear()
        for stage, queue in self.ready.items():
            self.ready[stage] = deque((f, args) for f, args in queue if f is not flight)
        if flight in self.flying:
            self.flying.remove(flight)
        self.finished.append(Finished(flight.plan, [], error, flight.busy))
