"""Each run of a pipeline's state: which steps succeeded and which failed, in one item per run of
the existing table, written with one UpdateItem as each step ends (no leader, no polling).

The item also keeps the whole pipeline its run began with (and its digest), which later steps
and forced re-runs follow, and the steps an operator asked for: what daemons alone write.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sqsjkr.backends.aws import conditional_write
from sqsjkr.backends.index import items_of_type
from sqsjkr.contract.pipeline import PipelineRun

#: The Type of a pipeline run's item; its Id is PREFIX + the run's key.
TYPE = "pipeline"
PREFIX = "pipeline|"


@dataclass(frozen=True)
class PipelineState:
    """What the steps of one run of a pipeline have done: the graph it started with (steps'
    `after` and `on_failure`, not their jobs), the steps that succeeded and those that failed
    last (a failed step that later succeeds is no longer failed)."""

    key: str
    name: str
    root: str
    graph: dict[str, Any]
    succeeded: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    started_at: float = 0.0
    updated_at: float = 0.0
    #: The root's firing time (unix seconds), when a schedule's firing started the run.
    firing_at: float | None = None
    #: The whole pipeline (the message's `pipeline` object) the run began with, and its
    #: digest; None for a run begun by a daemon older than this field.
    pipeline: dict[str, Any] | None = None
    digest: str | None = None
    #: The steps an operator asked for (PipelineRun.asked), which the daemons run though not due.
    asked: frozenset[str] = frozenset()


class PipelineStore(Protocol):
    """Keeps the state of each run of a pipeline."""

    def step_ended(
        self, run: PipelineRun, succeeded: bool, now: float, firing_at: float | None = None
    ) -> PipelineState:
        """Note that run's step succeeded (or failed for good) and return the run's state."""

    def state(self, key: str) -> PipelineState | None:
        """The state of the run of key, if any step of it has ended."""


@dataclass
class MemoryPipelines:
    """A PipelineStore in memory, for unit tests."""

    states: dict[str, PipelineState] = field(default_factory=dict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def step_ended(
        self, run: PipelineRun, succeeded: bool, now: float, firing_at: float | None = None
    ) -> PipelineState:
        with self._mutex:
            graph = run.pipeline.graph_fields()
            had = self.states.get(run.key) or PipelineState(
                run.key,
                run.pipeline.name,
                run.pipeline.root,
                graph,
                started_at=now,
                firing_at=firing_at,
                pipeline=run.pipeline.as_fields(),
                digest=run.pipeline.digest(),
            )
            done, failed = set(had.succeeded), set(had.failed)
            if succeeded:
                done.add(run.step)
                failed.discard(run.step)
            else:
                failed.add(run.step)
            new = replace(had, succeeded=frozenset(done), failed=frozenset(failed), updated_at=now)
            self.states[run.key] = new
            return new

    def state(self, key: str) -> PipelineState | None:
        return self.states.get(key)

    def ask(self, key: str, asked: str) -> bool:
        with self._mutex:
            had = self.states.get(key)
            if had is None:
                return False
            self.states[key] = replace(had, asked=had.asked | {asked})
            return True


class DynamoPipelines:
    """A PipelineStore in the daemon's table: one item per run, `Id = pipeline|<key>`."""

    def __init__(self, client: Any, table: str, *, lives_seconds: float) -> None:
        self._client = client
        self._table = table
        self._lives = lives_seconds

    def step_ended(
        self, run: PipelineRun, succeeded: bool, now: float, firing_at: float | None = None
    ) -> PipelineState:
        step = {"SS": [run.step]}
        values: dict[str, Any] = {
            ":name": {"S": run.pipeline.name},
            ":root": {"S": run.pipeline.root},
            ":graph": {"S": json.dumps(run.pipeline.graph_fields(), separators=(",", ":"))},
            ":pipeline": {"S": json.dumps(run.pipeline.as_fields(), separators=(",", ":"))},
            ":digest": {"S": run.pipeline.digest()},
            ":now": {"N": repr(now)},
            ":expired": {"N": str(int(now + self._lives))},
            ":step": step,
        }
        sets = (
            "#name = if_not_exists(#name, :name), Root = if_not_exists(Root, :root), "
            "Graph = if_not_exists(Graph, :graph), StartedAt = if_not_exists(StartedAt, :now), "
            "#pipeline = if_not_exists(#pipeline, :pipeline), "
            "Digest = if_not_exists(Digest, :digest), "
            "UpdatedAt = :now, Expired = :expired"
        )
        if firing_at is not None:
            values[":firing"] = {"N": repr(firing_at)}
            sets += ", FiringAt = if_not_exists(FiringAt, :firing)"
        # A step that succeeds after it failed (a forced re-run) is no longer failed.
        changes = "ADD Succeeded :step DELETE Failed :step" if succeeded else "ADD Failed :step"
        answer = self._client.update_item(
            TableName=self._table,
            Key=_key(run.key),
            UpdateExpression=f"SET {sets} {changes}",
            ExpressionAttributeNames={"#name": "Name", "#pipeline": "Pipeline"},
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return state_of(answer["Attributes"])

    def ask(self, key: str, asked: str) -> bool:
        """Note that an operator asked for a step of the run of key (PipelineRun.asked): False
        when no step of that run has ended, so that there is no run to ask it of."""
        done, _ = conditional_write(
            self._client.update_item,
            self._table,
            Key=_key(key),
            UpdateExpression="ADD Asked :asked",
            ConditionExpression="attribute_exists(Root)",
            ExpressionAttributeValues={":asked": {"SS": [asked]}},
        )
        return done

    def state(self, key: str) -> PipelineState | None:
        item = self._client.get_item(TableName=self._table, Key=_key(key), ConsistentRead=True)
        found = item.get("Item")
        return None if found is None else state_of(found)

    def states(self) -> list[PipelineState]:
        """Every run's state still kept, newest first."""
        found = [state_of(item) for item in items_of_type(self._client, self._table, TYPE)]
        return sorted(found, key=lambda s: s.started_at, reverse=True)


def _key(key: str) -> dict[str, Any]:
    return {"Id": {"S": PREFIX + key}, "Type": {"S": TYPE}}


def state_of(item: dict[str, Any]) -> PipelineState:
    """A run's state from its item."""
    graph = json.loads(item["Graph"]["S"])
    firing = item.get("FiringAt", {}).get("N")
    pipeline = item.get("Pipeline", {}).get("S")
    return PipelineState(
        key=item["Id"]["S"].removeprefix(PREFIX),
        name=item["Name"]["S"],
        root=item["Root"]["S"],
        graph=graph,
        succeeded=frozenset(item.get("Succeeded", {}).get("SS", [])),
        failed=frozenset(item.get("Failed", {}).get("SS", [])),
        started_at=float(item["StartedAt"]["N"]),
        updated_at=float(item["UpdatedAt"]["N"]),
        firing_at=None if firing is None else float(firing),
        pipeline=None if pipeline is None else json.loads(pipeline),
        digest=item.get("Digest", {}).get("S"),
        asked=frozenset(item.get("Asked", {}).get("SS", [])),
    )
