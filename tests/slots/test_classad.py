"""The bounds every ClassAd expression is held to, and evaluation that never raises for
what the library cannot evaluate."""

from __future__ import annotations

import re
from typing import Any

import pytest

from slots import InvalidRequest, is_true, validate_expression
from slots._classad import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    check_expression,
    check_value,
    evaluate,
    evaluate_each,
    plain_result,
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty ClassAd expression"),
        ("  \n ", "empty ClassAd expression"),
        ("true\x00", "control character U+0000 at offset 4"),
        ('Name == "a\x00b"', "control character U+0000 at offset 10"),
        ("Cpus\x1b[2J > 1", "control character U+001B at offset 4"),
        ("Cpus > 1\x85", "control character U+0085 at offset 8"),
        ("Cpus\u2028> 1", "control character U+2028 at offset 4"),
        ("x" * (MAX_EXPRESSION_LENGTH + 1), f"at most {MAX_EXPRESSION_LENGTH}"),
        ("(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1), f"at most {MAX_NESTING}"),
        ("{" * (MAX_NESTING + 1) + "1" + "}" * (MAX_NESTING + 1), f"at most {MAX_NESTING}"),
        ("[a = " * (MAX_NESTING + 1) + "1" + "]" * (MAX_NESTING + 1), f"at most {MAX_NESTING}"),
    ],
)
def test_expressions_out_of_bounds_are_refused_before_the_library_sees_them(
    text: str, message: str
) -> None:
    for check in (check_expression, validate_expression):
        with pytest.raises(InvalidRequest, match=re.escape(message)):
            check(text)
    with pytest.raises(InvalidRequest):
        evaluate(text, {"Cpus": 1})
    with pytest.raises(InvalidRequest):
        evaluate_each(text, [{"Cpus": 1}])


@pytest.mark.parametrize(
    "text",
    [
        "x" * MAX_EXPRESSION_LENGTH,
        "(" * MAX_NESTING + "1" + ")" * MAX_NESTING,
        # Brackets inside strings and quoted names are not nesting.
        'Name == "' + "(" * 200 + '"',
        "'" + "[" * 200 + "' =?= undefined",
        # Tab, newline and return are whitespace, as in a configuration file.
        "Cpus >= 1 &&\n\tMemory >= 1\r\n",
    ],
)
def test_expressions_within_bounds_pass(text: str) -> None:
    assert check_expression(text) == text
    validate_expression(text)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="is a string"):
        check_expression(["true"])


def test_what_the_library_cannot_evaluate_is_an_error_value_not_an_exception() -> None:
    # A sum too deep for the library's evaluator: it raises, the bridge answers ERROR.
    too_deep = "+".join(["1"] * 2000)
    validate_expression(too_deep)
    value = evaluate(too_deep, {})
    assert value.name == "Error"
    assert is_true(f"({too_deep}) > 0", {}) is False
    assert evaluate_each(too_deep, [{}, {}]) == [value, value]


def test_ads_the_library_cannot_hold_evaluate_to_error() -> None:
    # Integers beyond 64 bits become reals; a name with NUL cannot be held at all, which
    # matters only when the expression may look it up.
    assert is_true("X > 1e20", {"X": 2**70}) is True
    assert is_true("Y == 1", {"Y": 1, "a\x00": 1}) is True
    assert evaluate('eval("Y")', {"Y": 1, "a\x00": 1}).name == "Error"
    assert is_true("Y == 1", {"Y": 1}, {"T\x00": 1, "t": 2}) is True
    assert is_true('eval("t") == 2', {"Y": 1}, {"T\x00": 1, "t": 2}) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("totalcpus * 2", 16),  # names are case-insensitive
        ("MY.TotalCpus + TARGET.Cpus", 9),
        ("TARGET.Cpus + Memory", 2049),
        ("[a = 1; b = a + TotalCpus].b", 9),
        ("Rec.x + size(List)", 12),
        ('eval(strcat("Total", "Cpus")) + 1', 9),
        ("ifThenElse(isUndefined(Missing), Memory, 0)", 2048),
        ("'Odd Name' + 1", 4),
        ("unparse(Rec)", "\n    [\n        x = 10\n    ]"),
    ],
)
def test_an_expression_sees_every_attribute_it_refers_to(text: str, expected: Any) -> None:
    """Only the attributes an expression refers to are handed to the library, unless it
    refers to names only known when evaluated (``eval``)."""
    my: dict[str, Any] = {
        "TotalCpus": 8,
        "Memory": 2048,
        "Rec": {"x": 10},
        "List": [1, 2],
        "Odd Name": 3,
    }
    assert plain_result(evaluate(text, my, {"Cpus": 1})) == expected
    assert [plain_result(v) for v in evaluate_each(text, [my, my], {"Cpus": 1})] == [
        expected,
        expected,
    ]


def test_evaluate_each_parses_once_and_answers_per_ad() -> None:
    ads: list[dict[str, Any]] = [{"Cpus": 1}, {"Cpus": 8}, {}]
    assert [v is True for v in evaluate_each("Cpus >= 4", ads)] == [False, True, False]
    assert evaluate_each("false", ads) == [False, False, False]
    assert [plain_result(v) for v in evaluate_each("Cpus * 2", ads)] == [2, 16, None]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{1, "a", [b = 2]}', [1, "a", {"b": 2}]),
        ("[a = 1; b = {true}]", {"a": 1, "b": [True]}),
        ("absTime(60)", 60.0),
        ("relTime(5)", 5.0),
        ("undefined", None),
        ("error", None),
        ("1.5", 1.5),
    ],
)
def test_plain_results_are_json_values(text: str, expected: Any) -> None:
    assert plain_result(evaluate(text, {})) == expected


def test_values_nested_too_deep_are_refused_without_recursion() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(
        InvalidRequest, match=f"Foo nests lists or records deeper than {MAX_NESTING}"
    ):
        check_value(deep, name="Foo")
    within: Any = 1
    for _ in range(MAX_NESTING):
        within = {"a": within}
    check_value(within)
    with pytest.raises(InvalidRequest):
        check_value([within])
