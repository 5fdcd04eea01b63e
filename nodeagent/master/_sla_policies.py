"""The SLA policies the master holds: set over the API (durable) and read from a file.

``PUT /v1/sla/policies/{group}`` policies are written to the master's store (document
``sla_policies``) before the reply; the optional ``sla_file`` (TOML, or JSON when its name
ends in ``.json``) is read at start and on SIGHUP, as part of the configuration (a bad
file stops the start with exit status 2, and a reload with one is refused whole). **For a
group both name, the API's policy wins**; deleting it over the API brings the file's back.

The file::

    [policies."www-data/prod/web"]
    kind = "percentage"
    percentage = 95
    duration = "30m"        # seconds, or a duration with units
    size = 100              # optional: the group's declared size

(JSON: ``{"policies": {"www-data/prod/web": {...}}}``, durations in seconds or as text.)
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent._durations import parse_duration
from nodeagent._peer import PeerClient
from nodeagent._store import Documents, StoreError
from nodeagent.master._coordinators import ask_coordinators, coordinator_client
from nodeagent.master._sla import (
    Instance,
    NodeAds,
    Probe,
    SlaPolicy,
    policy_from_json,
    policy_json,
    probe,
    questions,
)
from slots import InvalidRequest

__all__ = ["SlaBook", "SlaFile", "read_sla_file"]

_DOCUMENT = "sla_policies"


@dataclass(frozen=True, kw_only=True, slots=True)
class SlaFile:
    """The policies of an ``sla_file``, as read (a change of its text is a change here)."""

    path: Path
    policies: tuple[SlaPolicy, ...]


def _file_policy(group: str, doc: object) -> SlaPolicy:
    if isinstance(doc, Mapping) and isinstance(doc.get("duration"), str):
        try:
            doc = {**doc, "duration": parse_duration(doc["duration"])}
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    return policy_from_json(group, doc)


def read_sla_file(value: object) -> SlaFile | None:
    """The ``sla_file`` configuration key: read and check the file it names; raises
    :class:`ValueError` naming the file and the defect."""
    if value is None or isinstance(value, SlaFile):
        return value
    if not isinstance(value, str | Path):
        raise ValueError(  # noqa: TRY004 (pydantic reports ValueError only)
            "sla_file is the path of a TOML or JSON file"
        )
    path = Path(value)
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ValueError(f"{path} is not valid {kind}: {exc}") from None
    if not isinstance(document, dict) or set(document) - {"policies"}:
        raise ValueError(f"{path}: the file holds one table, 'policies'")
    table = document.get("policies", {})
    if not isinstance(table, dict):
        raise ValueError(  # noqa: TRY004 (pydantic reports ValueError only)
            f"{path}: 'policies' maps each group to its policy"
        )
    policies, problems = [], []
    for group, doc in sorted(table.items()):
        try:
            policies.append(_file_policy(group, doc))
        except InvalidRequest as exc:
            problems.append(f"{group}: {exc.message}")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return SlaFile(path=path, policies=tuple(policies))


@dataclass
class SlaBook:
    """The policies in force (the API's over the file's) and the coordinators' client.

    :meth:`check` is the one SLA check of a set of hosts: it asks the coordinators the
    affected groups name, then :func:`~nodeagent.master._sla.probe`.
    """

    store: Documents
    file: SlaFile | None = None
    coordinator_timeout: float = 5.0
    api: dict[str, SlaPolicy] = field(default_factory=dict)
    client: PeerClient = field(default_factory=lambda: coordinator_client(5.0))

    def load(self) -> None:
        """The API's policies from the store; raises :class:`StoreError` for a document
        this version cannot read."""
        saved = self.store.load(_DOCUMENT) or {}
        try:
            self.api = {g: policy_from_json(g, doc) for g, doc in saved.items()}
        except (InvalidRequest, AttributeError) as exc:
            raise StoreError(f"unreadable SLA policies in {self.store.where}: {exc}") from None
        self.client.timeout = self.coordinator_timeout

    def reconfigure(self, file: SlaFile | None, coordinator_timeout: float) -> None:
        self.file = file
        self.coordinator_timeout = coordinator_timeout
        self.client.timeout = coordinator_timeout

    def policies(self) -> dict[str, SlaPolicy]:
        """Every policy in force, by group."""
        found = {p.group: p for p in (self.file.policies if self.file else ())}
        found.update(self.api)
        return found

    def source(self, group: str) -> str:
        return "api" if group in self.api else "file"

    def policy_json(self, policy: SlaPolicy) -> dict[str, Any]:
        """A policy in force as the API shows it, with its ``source`` (``api``, ``file``)."""
        return {**policy_json(policy), "source": self.source(policy.group)}

    def put(self, policy: SlaPolicy) -> None:
        """Set the API's policy of its group: written, then in force; raises
        :class:`StoreError` changing nothing."""
        updated = {**self.api, policy.group: policy}
        self._save(updated)
        self.api = updated

    def delete(self, group: str) -> bool:
        """Remove the API's policy of ``group`` (``False``: it had none); raises
        :class:`StoreError` changing nothing."""
        if group not in self.api:
            return False
        updated = {g: p for g, p in self.api.items() if g != group}
        self._save(updated)
        self.api = updated
        return True

    def _save(self, policies: Mapping[str, SlaPolicy]) -> None:
        doc = {
            group: {k: v for k, v in policy_json(policy).items() if k != "group"}
            for group, policy in policies.items()
        }
        self.store.save(**{_DOCUMENT: doc})

    async def check(
        self,
        entries: list[NodeAds],
        hosts: Collection[str],
        now: float,
        *,
        lost: Collection[str] = (),
        found: Sequence[Instance] | None = None,
    ) -> Probe:
        """Whether ``hosts`` may go at ``now``: the coordinators asked (each within the
        timeout, all at once), then the probe (``found`` as :func:`probe` takes it)."""
        policies = self.policies()
        asked = questions(entries, policies, hosts, now, lost=lost, found=found)
        answers = (
            await ask_coordinators(asked, client=self.client, within=self.coordinator_timeout)
            if asked
            else {}
        )
        return probe(entries, policies, hosts, now, lost=lost, answers=answers, found=found)
