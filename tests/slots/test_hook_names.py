"""The hooks a machine holds, as its ad publishes them (``DrainHookNames``,
``DrainHookDurations``), and the policy's checks of their declared durations."""

from __future__ import annotations

from typing import Any

import pytest

from slots import InvalidRequest, Machine, MachinePolicy, Resources


@pytest.mark.parametrize(
    ("hooks", "durations", "names", "published"),
    [
        ((), (), "", None),
        (("reboot",), (), "reboot", None),
        (("reboot", "patch"), (("reboot", 90.0),), "patch,reboot", "reboot=90"),
        (("a", "b"), (("a", 1.5), ("b", 600.0)), "a,b", "a=1.5,b=600"),
    ],
)
def test_the_ad_names_the_hooks_and_their_declared_durations(
    hooks: tuple[str, ...], durations: Any, names: str, published: str | None
) -> None:
    policy = MachinePolicy(hooks=frozenset(hooks), hook_durations=durations)
    ad = Machine(host="h", total=Resources(cpus=1), policy=policy, now=0.0).ad(1.0)["machine"]
    assert ad["DrainHookNames"] == names
    assert ad.get("DrainHookDurations") == published


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        ((("x", 5.0),), "a duration is declared for hook 'x', which is not one"),
        ((("reboot", 0.0),), "hook 'reboot': its expected duration must be positive"),
        ((("reboot", float("nan")),), "hook 'reboot': its expected duration must be positive"),
        ((("reboot", 5.0), ("patch", 1.0)), "hook durations are given as sorted"),
    ],
)
def test_declared_durations_are_checked(durations: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        MachinePolicy(hooks=frozenset({"reboot", "patch"}), hook_durations=durations)
    assert message in refused.value.message
