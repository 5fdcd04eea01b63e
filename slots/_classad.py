"""The one bridge to the official ClassAd library (``classad2`` from ``htcondor``).

Every ClassAd expression is checked, parsed and evaluated here: START and check
expressions, the master's constraints, the defrag daemon's policy. Ads are rendered as
ClassAd long format (``condor_status -l``: one ``Attr = value`` per line, ads separated
by a blank line). ``classad2`` is imported lazily: it costs ~20 MiB.

Bounds. An expression is at most :data:`MAX_EXPRESSION_LENGTH` characters, nests
brackets at most :data:`MAX_NESTING` deep and holds no control character but tab,
newline and carriage return (:func:`check_expression`, run by every function here that
takes an expression). Those caps bound parsing, not evaluation: a short expression can
still take seconds to evaluate (``regexp("^(a+)+$", …)``, a record whose attributes
double each other), and ``classad2`` holds the GIL while it evaluates. The functions
here run in the caller's thread, so a daemon evaluating an expression a caller sent
runs :func:`evaluate_each` in a worker process it can kill
(:mod:`nodeagent._expressions._evaluator`); the model's own evaluations stay here.

Evaluation never raises for what the library cannot evaluate (its depth and size
limits): the result is the ClassAd ``error`` value, which is not true, as in HTCondor.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slots._errors import InvalidRequest

if TYPE_CHECKING:
    import classad2

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_NESTING",
    "AdValue",
    "check_expression",
    "check_value",
    "evaluate",
    "evaluate_each",
    "is_true",
    "load_library",
    "parse_long",
    "plain_result",
    "render_long",
    "render_value",
    "validate_expression",
]

#: The longest expression accepted, in characters.
MAX_EXPRESSION_LENGTH = 8192
#: How deep brackets may nest in an expression, and lists and records in an ad's value
#: (the library itself parses a little over 100 levels).
MAX_NESTING = 64

#: What an attribute may hold in a rendered ad.
AdValue = bool | int | float | str | None | Mapping[str, Any] | list[Any]

# Control characters (C0 but tab, newline and return; DEL; C1) and the Unicode line and
# paragraph separators: none belongs in an expression, NUL stops the library's parser.
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")
_OPENING = {"(": ")", "[": "]", "{": "}"}
_CLOSING = frozenset(_OPENING.values())
_INT64 = (-(2**63), 2**63 - 1)


def _classad() -> Any:
    import classad2  # noqa: PLC0415  (lazy: heavy import)

    return classad2


def load_library() -> None:
    """Import ``classad2`` now rather than at the first expression (a worker process
    does so before it says it is ready)."""
    _classad()


def _to_classad(ad: Mapping[str, AdValue]) -> classad2.ClassAd:
    # Most values are plain scalars: tested by exact type first (an ABC check costs more
    # than the rest of the conversion).
    return _classad().ClassAd(
        {k: v if type(v) in _SCALARS else _plain(v) for k, v in ad.items() if v is not None}
    )


_SCALARS = frozenset((str, bool, float))


def _plain(value: AdValue) -> Any:
    """A value as ``classad2`` takes it: integers beyond 64 bits become reals."""
    if type(value) is int:
        return value if _INT64[0] <= value <= _INT64[1] else float(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_LITERALS = {"true": True, "false": False}


def _literal(text: str) -> bool | None:
    """``True``/``False`` for the literal expressions, without loading the library."""
    return _LITERALS.get(text.strip().lower())


# String literals ("…") and quoted attribute names ('…'), with backslash escapes.
_QUOTED = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'""", re.DOTALL)
_BRACKET = re.compile(r"[()\[\]{}]")


def _nesting(text: str) -> int:
    """How deep brackets nest outside quotes (unbalanced ones are the parser's business)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_QUOTED.sub("", text)):
        if match.group() in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def check_expression(text: object) -> str:
    """Return ``text`` if it is within the bounds of an expression, else raise
    :class:`InvalidRequest` (``request.invalid``) saying which bound it breaks.

    The bounds: a non-blank string of at most :data:`MAX_EXPRESSION_LENGTH` characters,
    brackets nested at most :data:`MAX_NESTING` deep, no control character but tab,
    newline and carriage return, no Unicode line or paragraph separator. Pure and
    linear in the length: it does not load the ClassAd library.
    """
    if not isinstance(text, str):
        raise InvalidRequest("a ClassAd expression is a string")
    if not text.strip():
        raise InvalidRequest("empty ClassAd expression")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidRequest(
            f"ClassAd expression of {len(text)} characters: at most {MAX_EXPRESSION_LENGTH}"
        )
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        raise InvalidRequest(
            f"ClassAd expression holds the control character U+{ord(bad.group()):04X} "
            f"at offset {bad.start()}"
        )
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise InvalidRequest(f"ClassAd expression nested {depth} deep: at most {MAX_NESTING}")
    return text


def check_value(value: object, *, name: str = "value") -> None:
    """Raise :class:`InvalidRequest` when lists and records nest in ``value`` deeper than
    :data:`MAX_NESTING` (``name`` says which attribute, in the message). Iterative: a
    value too deep for recursion is refused, not crashed on."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_NESTING:
            raise InvalidRequest(f"{name} nests lists or records deeper than {MAX_NESTING}")
        pending.extend((child, depth + 1) for child in children)


def _tree(text: str) -> classad2.ExprTree:
    """``text`` checked and parsed; raises :class:`InvalidRequest`."""
    check_expression(text)
    lib = _classad()
    try:
        return lib.ExprTree(text)
    except (lib.ClassAdException, ValueError) as exc:
        raise InvalidRequest(f"not a ClassAd expression: {text!r}") from exc


def validate_expression(text: str) -> None:
    """Raise :class:`InvalidRequest` unless ``text`` is within the bounds of
    :func:`check_expression` and parses as a ClassAd expression."""
    if _literal(check_expression(text)) is None:
        _tree(text)


# ``eval("…")`` looks attributes up by a name computed at evaluation time.
_DYNAMIC = re.compile(r"\beval\s*\(", re.IGNORECASE)
_SCOPES = frozenset(("my", "target"))


def _references(text: str, tree: classad2.ExprTree) -> frozenset[str] | None:
    """The attribute names (lower case) ``tree`` can look up in an ad, or ``None`` when
    they cannot all be known before evaluating it (``eval()``, a quoted name).

    Ad values here are literals, never expressions, so an ad reduced to these attributes
    evaluates ``tree`` exactly as the whole ad does; converting only them is most of the
    saving when an ad has dozens of attributes.
    """
    if _DYNAMIC.search(_QUOTED.sub("", text)):
        return None
    lib = _classad()
    try:
        references = lib.ClassAd().externalRefs(tree)
    except lib.ClassAdException:
        return None
    names = set()
    for reference in references:
        parts = str(reference).lower().split(".")
        if len(parts) > 1 and parts[0] in _SCOPES:
            parts = parts[1:]
        if not parts[0] or "'" in parts[0]:
            return None
        names.add(parts[0])
    return frozenset(names)


def _scope(ad: Mapping[str, AdValue] | None, references: frozenset[str] | None) -> Any:
    """``ad`` (only its ``references``, when known) as a ClassAd; ``None`` for no ad, or
    for one the library cannot hold (an attribute name with NUL, …), which evaluation
    then treats as an error."""
    if ad is None:
        return None
    if references is not None:
        ad = {k: v for k, v in ad.items() if k.lower() in references}
    lib = _classad()
    try:
        return _to_classad(ad)
    except (lib.ClassAdException, SystemError, TypeError, ValueError):
        return None


def _eval(tree: classad2.ExprTree, my: Any, target: Any) -> Any:
    lib = _classad()
    try:
        return tree.eval(my, target)
    except lib.ClassAdException:
        return lib.Value.Error


def evaluate(
    text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
) -> Any:
    """Evaluate expression ``text`` with ``my`` as MY scope and ``target`` as TARGET.

    Raises :class:`InvalidRequest` for an expression out of bounds or that does not
    parse. The result is ``classad2``'s: a Python value, ``classad2.Value.Undefined``
    (which is truthy: test results with ``is True``) or ``classad2.Value.Error`` — also
    what an evaluation beyond the library's limits, or an ad it cannot hold, gives.
    """
    literal = _literal(check_expression(text))
    if literal is not None:
        return literal
    tree = _tree(text)
    return _evaluate(tree, _references(text, tree), my, target)


def _evaluate(
    tree: classad2.ExprTree,
    references: frozenset[str] | None,
    my: Mapping[str, AdValue],
    target: Mapping[str, AdValue] | None,
) -> Any:
    scope = _scope(my, references)
    target_scope = None if target is None else _scope(target, references)
    if scope is None or (target is not None and target_scope is None):
        return _classad().Value.Error
    return _eval(tree, scope, target_scope)


def evaluate_each(
    text: str, ads: Sequence[Mapping[str, AdValue]], target: Mapping[str, AdValue] | None = None
) -> list[Any]:
    """:func:`evaluate` of ``text`` against each of ``ads`` in turn (parsed once).

    The cost of a call is not bounded here (see the module docstring): a daemon runs it
    for its callers in a worker it can kill, :class:`nodeagent._expressions._evaluator.Evaluator`.
    """
    literal = _literal(check_expression(text))
    if literal is not None:
        return [literal] * len(ads)
    tree = _tree(text)
    references = _references(text, tree)
    return [_evaluate(tree, references, ad, target) for ad in ads]


def is_true(
    text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
) -> bool:
    """True only when the expression evaluates to boolean true (undefined is not)."""
    return evaluate(text, my, target) is True


def plain_result(value: Any) -> AdValue:
    """An evaluation result as plain JSON-able Python: ``None`` for undefined and
    error, a dict for a record, a list for a list, seconds since the epoch for an
    absolute time; other values as they are."""
    lib = _classad()
    if isinstance(value, lib.Value):
        return None
    if isinstance(value, lib.ClassAd):
        return {k: plain_result(v) for k, v in dict(value).items()}
    if isinstance(value, list):
        return [plain_result(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


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
