"""A job group's name: the service or batch a claim's job is an instance of.

Aurora calls it the job key (``role/environment/name``, e.g. ``www-data/prod/web``); a
claim may name one, the slot ad publishes it as ``JobGroup`` and the master's SLA
policies are kept per group. The rule (:data:`GROUP_NAME`): 1 to 128 characters, one or
more segments of letters, digits, ``_``, ``.`` and ``-`` joined by single ``/``; each
segment starts with a letter or digit.
"""

from __future__ import annotations

import re

from slots._errors import InvalidRequest

__all__ = ["GROUP_NAME", "check_group_name"]

#: What a job group's name may be (and at most 128 characters).
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)*")

_LIMIT = 128


def check_group_name(name: str) -> str:
    """``name`` if it is a job group's name (:data:`GROUP_NAME`); raises :class:`InvalidRequest`."""
    if len(name) > _LIMIT or not GROUP_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{name[:80]!r} is not a job group: 1 to 128 characters, segments of letters, "
            "digits, '_', '.' or '-' (each starting with a letter or digit) joined by '/'"
        )
    return name
