"""No logged value can start a line of its own: records through a real handler."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from nodeagent._logsafe import SafeFormatter, escape_controls, install

FORMAT = "%(levelname)s %(name)s: %(message)s"
FORGED = "node7\n2030-01-01 00:00:00,000 INFO nodeagent.master: machine DOWN"


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger with a stream handler through a SafeFormatter, as a daemon sets it up."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger("tests.logsafe")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    install(logger)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("a\nb", "a\\nb"),
        ("a\r\nb", "a\\r\\nb"),
        ("a\tb", "a\\tb"),
        ("\x00\x1b[31m\x7f", "\\x00\\x1b[31m\\x7f"),
        ("\x0b\x0c\x1c\x1d\x1e", "\\x0b\\x0c\\x1c\\x1d\\x1e"),
        ("nel\x85c1\x9b", "nel\\x85c1\\x9b"),
        ("ls\u2028ps\u2029", "ls\\u2028ps\\u2029"),
        ("bidi\u202eabc\u2066\u200f", "bidi\\u202eabc\\u2066\\u200f"),
        ("café ✓ 東京 \\n", "café ✓ 東京 \\n"),
    ],
)
def test_every_line_breaking_or_disguising_character_is_escaped(value: str, escaped: str) -> None:
    assert escape_controls(value) == escaped
    assert len(escape_controls(value).splitlines()) <= 1


def test_a_forged_line_in_an_argument_stays_on_its_record(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    logger.warning("node %s is lost: no ad for %.0f s", FORGED, 60.0)
    logger.info(FORGED)  # in the message itself
    logger.info("%(name)s pushed", {"name": "x\u2028INFO fake"})
    lines = stream.getvalue().splitlines()
    assert lines == [
        "WARNING tests.logsafe: node node7\\n2030-01-01 00:00:00,000 INFO nodeagent.master: "
        "machine DOWN is lost: no ad for 60 s",
        "INFO tests.logsafe: node7\\n2030-01-01 00:00:00,000 INFO nodeagent.master: machine DOWN",
        "INFO tests.logsafe: x\\u2028INFO fake pushed",
    ]
    # As str.splitlines and a line-reading tool would see it: no separator but the last.
    assert stream.getvalue().count("\n") == 3


def refuse(name: str) -> None:
    raise ValueError(f"bad name {name}")


def test_a_traceback_stays_on_its_record_line(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    try:
        refuse(FORGED)
    except ValueError:
        logger.exception("request for %s failed", "n1\r\nfake")
    text = stream.getvalue()
    assert text.count("\n") == 1
    assert text.startswith("ERROR tests.logsafe: request for n1\\r\\nfake failed\\nTraceback")
    assert "ValueError: bad name node7\\n2030-01-01" in text


def test_the_record_is_left_as_logged_for_other_handlers(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    logger.addHandler(keep)
    try:
        logger.info("name %s", "a\nb")
    finally:
        logger.removeHandler(keep)
    assert seen == ["name a\nb"]
    assert stream.getvalue() == "INFO tests.logsafe: name a\\nb\n"


def test_install_keeps_each_handler_format_and_is_idempotent() -> None:
    logger = logging.getLogger("tests.logsafe.install")
    logger.propagate = False
    streams = [io.StringIO(), io.StringIO()]
    handlers = [logging.StreamHandler(s) for s in streams]
    handlers[0].setFormatter(logging.Formatter("[{levelname}] {message}", style="{"))
    for handler in handlers:
        logger.addHandler(handler)
    try:
        install(logger)
        install(logger)
        formatter = handlers[0].formatter
        assert isinstance(formatter, SafeFormatter)
        assert not isinstance(formatter.inner, SafeFormatter)
        logger.error("x\ny")
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
    assert [s.getvalue() for s in streams] == ["[ERROR] x\\ny\n", "x\\ny\n"]


def test_a_formatter_of_its_own_formats_as_logging_does() -> None:
    record = logging.LogRecord("n", logging.INFO, __file__, 1, "v=%s", ("1\n2",), None)
    assert SafeFormatter("%(levelname)s %(message)s").format(record) == "INFO v=1\\n2"
