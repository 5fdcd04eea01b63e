"""How a ``nodeagent`` client command fails: one error tree, one exit status per branch.

Nothing imported (not even ``typing``), and no HTTP: every command imports it, including
those that make no request (``token create``). Each error carries a stable ``code``, a
``message`` and the process ``exit_status`` documented in ``docs/cli.md``;
:func:`nodeagent.cli._common.outcome` prints ``code: message`` on stderr and exits with the status::

    CliError           1  drain.cancelled, drain.ended: a waited-for drain ended otherwise
    ├── UsageError     2  cli.usage, cli.bad_duration, cli.bad_url, cli.token_file, …
    ├── Unreachable    3  agent.unreachable, agent.timeout: no answer from the agent
    │                     (master.…, defrag.… for the other daemons)
    ├── AgentError        the daemon answered with an error body (``reply`` holds it)
    │   ├── Refused        1  any 4xx but 401/403: the daemon's code (drain.in_progress, …)
    │   ├── Unauthorized   4  401/403: auth.unauthenticated, auth.forbidden; and
    │   │                     cli.token_required: a master sent the request on to its
    │   │                     leader over TCP, and no token was given
    │   └── AgentFailed    5  5xx, or a reply that is not the API's JSON (agent.bad_reply);
    │                         master.no_leader (503: no master leads now), and a redirect
    │                         not followed: master.redirect_refused (to a master not given
    │                         with --host, nor the same origin), master.too_many_redirects
    │                         (more than three in a row), master.insecure_redirect (https
    │                         to http), or a 307 without a usable Location (master.not_leader)
    ├── Declined       6  cli.declined: the drain or change was not confirmed at the
    │                     prompt; cli.no_terminal: a cluster-wide change with no terminal
    │                     to ask on and no --yes; schedule.needs_force: a schedule whose
    │                     preview warns of its times, with --yes but not --force
    ├── Pending       10  machine.pending: the change was made, but some node has not
    │                     confirmed it yet (master down/up: unreachable, lost, retrying)
    └── Interrupted  130  cli.interrupted: Ctrl-C

Raising any of them leaves nothing behind on the client side; what the daemon did is
what its reply says.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs a command ≈ 2 ms
if TYPE_CHECKING:
    from typing import ClassVar

    from nodeagent.cli._http import Reply

__all__ = [
    "AgentError",
    "AgentFailed",
    "CliError",
    "Declined",
    "Interrupted",
    "Pending",
    "Refused",
    "Unauthorized",
    "Unreachable",
    "UsageError",
]


class CliError(Exception):
    """A command failed; ``code: message`` goes to stderr and ``exit_status`` to the shell."""

    exit_status: ClassVar[int] = 1

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class UsageError(CliError):
    """The command as given cannot run: bad option value, unreadable token file, …"""

    exit_status: ClassVar[int] = 2


class Unreachable(CliError):
    """No answer from the daemon: no socket, connection refused or reset, timed out."""

    exit_status: ClassVar[int] = 3


class AgentError(CliError):
    """The daemon answered with an error; ``reply`` is its answer, ``condor_code`` its
    HTCondor code when it has one."""

    def __init__(
        self, code: str, message: str, *, reply: Reply, condor_code: int | None = None
    ) -> None:
        super().__init__(code, message)
        self.reply = reply
        self.condor_code = condor_code


class Refused(AgentError):
    """The daemon refused the request (4xx other than 401 and 403); nothing changed."""

    exit_status: ClassVar[int] = 1


class Unauthorized(AgentError):
    """Missing, bad or expired token (401), or a token without the scope (403); or no
    token to follow a redirect to the leader over TCP (``cli.token_required``)."""

    exit_status: ClassVar[int] = 4


class AgentFailed(AgentError):
    """The daemon failed (5xx) or sent something that is not the API's JSON."""

    exit_status: ClassVar[int] = 5


class Declined(CliError):
    """A change was not confirmed, so not made: the drain transaction was not committed
    at the prompt (and has been cancelled), or a cluster-wide change was not applied (no
    terminal to ask on and no ``--yes``; a warning that needs ``--force``)."""

    exit_status: ClassVar[int] = 6


class Pending(CliError):
    """The master made the change, but some node has not confirmed it yet: the master
    keeps trying, and the message names each node and why."""

    exit_status: ClassVar[int] = 10


class Interrupted(CliError):
    """Ctrl-C: the command stopped early; the message says what it left behind."""

    exit_status: ClassVar[int] = 130
