"""A file's route through the stages, as data: branches that start side by side from the file, then stages
that run one after another on the item the branches' results merge into (`mediaindex.pipeline.stages.merge`).

Speech reads the file itself, so transcribing never waits for the pictures nor they for it; its result joins
the decoded item before the stages that read every segment (summary, embed).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mediaindex.pipeline.stages.registry import StageName


@dataclass(frozen=True)
class Route:
    branches: tuple[tuple[StageName, ...], ...]  # each starts from the file's path
    then: tuple[StageName, ...] = ()  # on the merged item, in order

    def only(self, stages: Collection[StageName]) -> Route:
        """The route over the stages a pipeline has; branches left empty are dropped."""
        branches = tuple(kept for b in self.branches if (kept := tuple(s for s in b if s in stages)))
        return Route(branches, tuple(s for s in self.then if s in stages))

    def without(self, stage: StageName) -> Route:
        return self.only([s for s in self.stages if s != stage])

    def from_then(self, stage: StageName) -> Route:
        """The part of the route from `stage` on, with no branches: for an item that exists already."""
        return Route((), self.then[self.then.index(stage):]) if stage in self.then else Route(())

    @property
    def stages(self) -> list[StageName]:
        return [s for b in self.branches for s in b] + list(self.then)


FULL_ROUTE = Route(branches=((StageName.DECODE, StageName.VISION), (StageName.SPEECH,)),
                   then=(StageName.SUMMARY, StageName.EMBED))
