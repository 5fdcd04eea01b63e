"""Machine resources in HTCondor units: Cpus, Memory (MiB), Disk (KiB), GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from slots._errors import InvalidRequest

__all__ = ["Resources"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Resources:
    """An amount of each resource; every amount is a non-negative integer."""

    cpus: int = 0
    memory: int = 0
    disk: int = 0
    gpus: int = 0

    def __post_init__(self) -> None:
        for name in ("cpus", "memory", "disk", "gpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidRequest(f"{name} must be an integer, not {value!r}")
            if value < 0:
                raise InvalidRequest(f"{name} must not be negative, not {value}")

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            cpus=self.cpus + other.cpus,
            memory=self.memory + other.memory,
            disk=self.disk + other.disk,
            gpus=self.gpus + other.gpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        """Subtract; raises :class:`InvalidRequest` if any amount would go negative."""
        return Resources(
            cpus=self.cpus - other.cpus,
            memory=self.memory - other.memory,
            disk=self.disk - other.disk,
            gpus=self.gpus - other.gpus,
        )

    def fits_in(self, other: Resources) -> bool:
        """True when every amount of ``self`` is at most the same amount of ``other``."""
        return (
            self.cpus <= other.cpus
            and self.memory <= other.memory
            and self.disk <= other.disk
            and self.gpus <= other.gpus
        )

    def shortfall(self, available: Resources) -> dict[str, int]:
        """What is missing from ``available`` to fit ``self``, by resource name."""
        missing = {
            "Cpus": self.cpus - available.cpus,
            "Memory": self.memory - available.memory,
            "Disk": self.disk - available.disk,
            "GPUs": self.gpus - available.gpus,
        }
        return {name: amount for name, amount in missing.items() if amount > 0}
