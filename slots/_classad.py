"""The one bridge to the official ClassAd library (``classad2`` from ``htcondor``).

START and check expressions are parsed and evaluated here, and ads are rendered
as ClassAd long format (``condor_status -l``: one ``Attr = value`` per line, ads
separated by a blank line). ``classad2`` is imported lazily: it costs ~20 MiB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from slots._errors import InvalidRequest

if TYPE_CHECKING:
    import classad2

__all__ = [
    "AdValue",
    "evaluate",
    "is_true",
    "parse_long",
    "render_long",
    "render_value",
    "validate_expression",
]

#: What an attribute may hold in a rendered ad.
AdValue = bool | int | float | str | None | Mapping[str, Any] | list[Any]


def _classad() -> Any:
    import classad2  # noqa: PLC0415  (lazy: heavy import)

    return classad2


def _to_classad(ad: Mapping[str, AdValue]) -> classad2.ClassAd:
    return _classad().ClassAd({k: _plain(v) for k, v in ad.items() if v is not None})


def _plain(value: AdValue) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_LITERALS = {"true": True, "false": False}


def _literal(text: str) -> bool | None:
    """``True``/``False`` for the literal expressions, without loading the library."""
    return _LITERALS.get(text.strip().lower())


def validate_expression(text: str) -> None:
    """Raise :class:`InvalidRequest` unless ``text`` parses as a ClassAd expression."""
    if not text.strip():
        raise InvalidRequest("empty ClassAd expression")
    if _literal(text) is not None:
        return
    lib = _classad()
    try:
        lib.ExprTree(text)
    except lib.ClassAdException as exc:
        raise InvalidRequest(f"not a ClassAd expression: {text!r}") from exc


def evaluate(
    text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
) -> Any:
    """Evaluate expression ``text`` with ``my`` as MY scope and ``target`` as TARGET."""
    literal = _literal(text)
    if literal is not None:
        return literal
    validate_expression(text)
    lib = _classad()
    tree = lib.ExprTree(text)
    scope = _to_classad(my)
    return tree.eval(scope, _to_classad(target) if target is not None else None)


def is_true(
    text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
) -> bool:
    """True only when the expression evaluates to boolean true (undefined is not)."""
    return evaluate(text, my, target) is True


def render_value(value: AdValue) -> str:
    """One value in ClassAd syntax (strings quoted, records ``[ … ]``, lists ``{ … }``)."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return (
                'real("NaN")'
                if math.isnan(value)
                else ('real("INF")' if value > 0 else 'real("-INF")')
            )
        return repr(value)
    if isinstance(value, str):
        return _render_string(value)
    if isinstance(value, Mapping):
        inner = "; ".join(f"{k} = {render_value(v)}" for k, v in value.items() if v is not None)
        return f"[ {inner} ]"
    return "{ " + ", ".join(render_value(v) for v in value) + " }"


def _render_string(value: str) -> str:
    """A string in old ClassAd syntax; the official printer settles backslashes.

    Old syntax cannot carry control characters: callers refuse them on input.
    """
    if "\\" not in value:
        return '"' + value.replace('"', '\\"') + '"'
    printed: str = _classad().ClassAd({"S": value}).printOld()
    return printed.strip().removeprefix("S = ")


def render_long(ads: Iterable[Mapping[str, AdValue]]) -> str:
    """Ads in long format: ``Attr = value`` lines, a blank line after each ad.

    Attributes whose value is ``None`` (undefined) are left out, as HTCondor does.
    """
    blocks = []
    for ad in ads:
        lines = [f"{k} = {render_value(v)}" for k, v in ad.items() if v is not None]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def parse_long(text: str) -> list[dict[str, Any]]:
    """Parse long-format ads with the official parser into plain dicts."""
    lib = _classad()
    return [_python(dict(ad)) for ad in lib.parseAds(text, lib.ParserType.Old)]


def _python(value: Any) -> Any:
    lib = _classad()
    if isinstance(value, lib.ClassAd):
        return {k: _python(v) for k, v in dict(value).items()}
    if isinstance(value, dict):
        return {k: _python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_python(v) for v in value]
    return value
