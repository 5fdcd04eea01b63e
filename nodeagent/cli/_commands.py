"""Every ``nodeagent`` command, declared once, as plain data.

Both ways a command line is run read this table: the entry point's parser
(:mod:`nodeagent.cli._fast`) runs the plain command lines without typer, and the typer
application (:mod:`nodeagent.cli._app`) builds its whole tree from it: the groups
(:data:`GROUPS`) and every command (:data:`COMMANDS`), with their options, arguments and
help, in the order ``--help`` lists them. A command is a dict:

* ``words``: after ``nodeagent`` (``("master", "plan")``);
* ``run``: ``module:function``, called with the parsed command line as keyword arguments,
  one per option and argument (its ``dest``);
* ``help``: typer's help, its first line the summary in the group's list;
* ``options`` (in ``--help``'s order) and ``argument``, described below;
* ``interspersed`` (default ``True``): ``False`` ends the options at the first argument
  (``claim -- CMD``);
* ``json_errors`` (default ``True``): ``False``, with ``--json``, does not print a daemon's
  error body;
* ``plain`` (default ``True``): ``False`` for the daemons and the demo, which start trio
  anyway and run only under typer: their function may raise typer's exceptions.

An option is a dict: ``names`` (``("--long", "-l")``), ``dest`` (default: the first name
without its dashes, ``-`` as ``_``), ``kind`` (default ``str``; ``flag`` sets ``True``,
``int`` an integer of at least ``min``, ``choice`` one of ``choices`` — matched without
regard to case unless ``case_sensitive`` — ``path`` a :class:`~pathlib.Path`, ``many`` a
list of texts, one per occurrence), ``default`` (``None``; a flag's ``False``),
``required``, ``envvar`` (stands in for an option not given), and for ``--help`` only
``help``, ``metavar`` and ``show_default`` (default ``True``). The argument is a dict:
``dest``, ``many`` (all the words that remain, a list), ``required``, ``help``,
``metavar``, ``show_default``.

No import at all, and nothing but literals: this is the first module every command reads
(a test imports it and the parser in a fresh interpreter and checks that typer, click,
rich, ``typing``, ``dataclasses`` and ``inspect`` stay out). The types below are for the
type checker only.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal, NotRequired, TypedDict

    Kind = Literal["flag", "str", "int", "choice", "path", "many"]

    class Option(TypedDict):
        """One option (see the module's docstring)."""

        names: tuple[str, ...]
        dest: NotRequired[str]
        kind: NotRequired[Kind]
        default: NotRequired[str | int | bool | None]
        required: NotRequired[bool]
        min: NotRequired[int]
        choices: NotRequired[tuple[str, ...]]
        case_sensitive: NotRequired[bool]
        envvar: NotRequired[str]
        help: NotRequired[str]
        metavar: NotRequired[str]
        show_default: NotRequired[bool]

    class Argument(TypedDict):
        """A command's argument (see the module's docstring)."""

        dest: str
        many: NotRequired[bool]
        required: NotRequired[bool]
        help: NotRequired[str]
        metavar: NotRequired[str]
        show_default: NotRequired[bool]

    class Command(TypedDict):
        """One command (see the module's docstring)."""

        words: tuple[str, ...]
        run: str
        help: str
        options: NotRequired[tuple[Option, ...]]
        argument: NotRequired[Argument]
        interspersed: NotRequired[bool]
        json_errors: NotRequired[bool]
        plain: NotRequired[bool]

    class Group(TypedDict):
        """A group of commands: its words (the root's are none) and its help."""

        words: tuple[str, ...]
        help: str


__all__ = ["COMMANDS", "GROUPS", "default", "dest"]


def dest(option: Option) -> str:
    """The keyword argument ``option`` sets: its ``dest``, else its first name's."""
    return option.get("dest") or option["names"][0].removeprefix("--").replace("-", "_")


def default(option: Option) -> str | int | bool | None:
    """The value of ``option`` not given (and without its variable): its ``default``, else
    ``False`` for a flag and ``None`` for the others."""
    return option.get("default", False if option.get("kind") == "flag" else None)


# --- what several commands share -----------------------------------------------------------

_JSON: Option = {
    "names": ("--json",),
    "dest": "json_output",
    "kind": "flag",
    "help": "Print exactly the API's JSON, one document per line.",
}

_AGENT: tuple[Option, ...] = (
    _JSON,
    {
        "names": ("--host",),
        "metavar": "URL",
        "show_default": False,
        "help": "A remote agent: http://HOST:PORT or https://HOST:PORT (port 9621 by default); "
        "needs --token. Env: NODEAGENT_HOST. Default: the local Unix socket.",
    },
    {
        "names": ("--token",),
        "metavar": "FILE",
        "show_default": False,
        "help": "File holding the bearer token for --host. Env: NODEAGENT_TOKEN_FILE.",
    },
    {
        "names": ("--socket",),
        "dest": "socket_path",
        "metavar": "PATH",
        "show_default": False,
        "help": "The agent's Unix socket. Env: NODEAGENT_SOCKET. "
        "Default: the daemon's (<runtime_dir>/nodeagent.sock).",
    },
)
"""``--json`` and how an agent is reached: every agent client command ends with these."""

_MASTER: tuple[Option, ...] = (
    _JSON,
    {
        "names": ("--host",),
        "metavar": "URL[,URL…]",
        "show_default": False,
        "help": "A remote master: http://HOST:PORT or https://HOST:PORT (port 9622 by default); "
        "needs --token. With several masters, list them all, separated by commas: the "
        "command goes to the first and follows a redirect to the leader only to one of "
        "them. Env: NODEAGENT_MASTER_HOST. Default: the master's Unix socket.",
    },
    {
        "names": ("--token",),
        "metavar": "FILE",
        "show_default": False,
        "help": "File holding the bearer token for --host. Env: NODEAGENT_MASTER_TOKEN_FILE.",
    },
    {
        "names": ("--socket",),
        "dest": "socket_path",
        "metavar": "PATH",
        "show_default": False,
        "help": "The master's Unix socket. Env: NODEAGENT_MASTER_SOCKET. "
        "Default: the master's (<runtime_dir>/master.sock).",
    },
)
"""``--json`` and how a master is reached: every master client command ends with these."""

_LOG_LEVEL: Option = {
    "names": ("--log-level",),
    "default": "info",
    "help": "debug, info, warning or error",
}


def _config(path: str, variable: str) -> Option:
    """A daemon's ``--config`` (its default ``path``, a test checks it is the daemon's)."""
    return {
        "names": ("--config", "-c"),
        "kind": "path",
        "envvar": variable,
        "help": f"TOML configuration (default {path} when it exists)",
    }


_AGENT_CONFIG = _config("/etc/nodeagent/nodeagent.toml", "NODEAGENT_CONFIG")
_MASTER_CONFIG = _config("/etc/nodeagent/master.toml", "NODEAGENT_MASTER_CONFIG")
_DEFRAG_CONFIG = _config("/etc/nodeagent/defrag.toml", "NODEAGENT_DEFRAG_CONFIG")

_WATCH: Option = {"names": ("--watch", "-w"), "kind": "flag", "help": "Refresh until Ctrl-C."}
_LONG: Option = {
    "names": ("--long", "-l"),
    "kind": "flag",
    "help": "ClassAd long format, like condor_status -l.",
}
_WAIT: Option = {
    "names": ("--wait",),
    "kind": "flag",
    "help": "Draw a progress bar until the operation ends.",
}
_CLAIM_ID: Argument = {
    "dest": "claim_id",
    "required": True,
    "metavar": "CLAIM_ID",
    "help": "The claim's id (see status).",
}
_MACHINES: Argument = {
    "dest": "machines",
    "many": True,
    "required": True,
    "metavar": "HOST...",
    "show_default": False,
    "help": "HOST, HOST/IP or IP; a bare HOST or IP is completed from the schedule.",
}
_OPERATION_ID: Argument = {
    "dest": "operation_id",
    "required": True,
    "metavar": "ID",
    "help": "The operation's id.",
}

_A = "nodeagent.cli._agent"
_M = "nodeagent.cli._master"
_MAINTAIN = "nodeagent.cli._maintain"
_DAEMONS = "nodeagent.cli._daemons"


# --- the groups and the commands ---------------------------------------------------------

GROUPS: tuple[Group, ...] = (
    {"words": (), "help": "Drain a node, plan cluster maintenance, defragment a pool."},
    {"words": ("token",), "help": "Bearer tokens for the agents' TCP listeners."},
    {
        "words": ("master",),
        "help": "The cluster master: node ads, the maintenance schedule, the plan.",
    },
    {
        "words": ("master", "schedule"),
        "help": "The Mesos maintenance schedule: get, set, clear.",
    },
    {
        "words": ("master", "maintain"),
        "help": "Rolling maintenance: drain, hook, health check and back, batch by batch.",
    },
    {
        "words": ("master", "sla"),
        "help": "Job groups' SLAs: their policies, and may these hosts go now?",
    },
    {
        "words": ("defrag",),
        "help": "The defrag daemon: drain fragmented machines so whole machines become free.",
    },
)
"""Every group, the root first; a group's commands come before its subgroups in
``--help``, the subgroups in this order."""

COMMANDS: tuple[Command, ...] = (
    {
        "words": ("version",),
        "run": "nodeagent.cli._common:version",
        "help": "Print the version and exit.",
    },
    {
        "words": ("run",),
        "run": f"{_DAEMONS}:agent",
        "plain": False,
        "help": "Run the node agent daemon in the foreground.\n\n"
        "It refuses to start (exit 8) when agent.db holds no state but the execute directory\n"
        "or the audit log show a previous life, unless --recover or --fresh says what to do.",
        "options": (
            _AGENT_CONFIG,
            _LOG_LEVEL,
            {
                "names": ("--recover",),
                "kind": "flag",
                "help": "If agent.db holds no state after a previous life: re-adopt the jobs "
                "still running from the execute directory; ids continue past the previous "
                "life's.",
            },
            {
                "names": ("--fresh",),
                "kind": "flag",
                "help": "If agent.db holds no state after a previous life: start with no "
                "claims, leaving those jobs alone; ids continue past the previous life's.",
            },
        ),
    },
    {
        "words": ("status",),
        "run": f"{_A}:status",
        "help": "The machine line (drain state, Start, cpus in use) and the slot table.\n\n"
        "--json prints GET /v1/ad. With --watch, one refresh per --interval until Ctrl-C.",
        "options": (
            _WATCH,
            {
                "names": ("--interval",),
                "default": "1s",
                "metavar": "DURATION",
                "show_default": False,
            },
            *_AGENT,
        ),
    },
    {
        "words": ("ad",),
        "run": f"{_A}:ad",
        "help": "The machine ad and every slot ad: a table, -l long format, --json the API's JSON.",
        "options": (_LONG, *_AGENT),
    },
    {
        "words": ("drain",),
        "run": f"{_A}:drain",
        "help": "Drain the node: show the estimate and the blockers, ask, then commit.\n\n"
        'Then "Commit?": y commits; anything else, end of input or Ctrl-C cancels.',
        "options": (
            {
                "names": ("--graceful",),
                "kind": "flag",
                "help": "Honour retirement, then evict (default).",
            },
            {"names": ("--quick",), "kind": "flag", "help": "Evict now, honouring vacate time."},
            {"names": ("--fast",), "kind": "flag", "help": "Kill every job now."},
            {
                "names": ("--reason",),
                "default": "",
                "help": "Why (shown in the ad as DrainReason).",
            },
            {
                "names": ("--on-completion",),
                "default": "none",
                "metavar": "ACTION",
                "help": "What happens once the node is drained: none, resume, exit, restart, "
                "or hook:NAME (a hook of the agent's configuration).",
            },
            {
                "names": ("--then",),
                "metavar": "HOOK",
                "show_default": False,
                "help": "Run this configured hook once the node is drained (--on-completion "
                "hook:HOOK); the node stays closed until it succeeded and is healthy.",
            },
            {
                "names": ("--deadline",),
                "metavar": "DURATION",
                "show_default": False,
                "help": "Evict (as --quick) whatever still runs this long after commit: 90s, "
                "15m, 2h.",
            },
            {
                "names": ("--start",),
                "metavar": "EXPR",
                "show_default": False,
                "help": "ClassAd START expression admitting jobs during a graceful drain.",
            },
            {
                "names": ("--check",),
                "metavar": "EXPR",
                "show_default": False,
                "help": "One-shot: drain only if this ClassAd expression is true on the "
                "machine ad (condor_drain -check); no prompt.",
            },
            {
                "names": ("--yes", "-y"),
                "kind": "flag",
                "help": "Commit without asking (one-shot).",
            },
            {
                "names": ("--dry-run",),
                "kind": "flag",
                "help": "Show the estimate, then cancel; exit 0.",
            },
            {
                "names": ("--wait",),
                "kind": "flag",
                "help": "Show progress until the node is drained.",
            },
            *_AGENT,
        ),
    },
    {
        "words": ("cancel",),
        "run": f"{_A}:cancel",
        "help": "Cancel a drain (pending or running): Start comes back, Retiring jobs keep "
        "running.",
        "argument": {
            "dest": "request_id",
            "metavar": "[REQUEST_ID]",
            "show_default": False,
            "help": "Default: whatever is in force.",
        },
        "options": _AGENT,
    },
    {
        "words": ("claim",),
        "run": f"{_A}:claim",
        "help": "Carve a dynamic slot running CMD (after --), or adopting --pid.",
        "interspersed": False,
        "argument": {
            "dest": "command",
            "many": True,
            "metavar": "-- CMD...",
            "show_default": False,
            "help": "The job's argv.",
        },
        "options": (
            {
                "names": ("--cpus",),
                "kind": "int",
                "min": 1,
                "default": 1,
                "help": "Cpus of the dynamic slot.",
            },
            {
                "names": ("--memory",),
                "kind": "int",
                "min": 0,
                "default": 0,
                "help": "Memory in MiB.",
            },
            {"names": ("--disk",), "kind": "int", "min": 0, "default": 0, "help": "Disk in KiB."},
            {"names": ("--gpus",), "kind": "int", "min": 0, "default": 0, "help": "GPUs."},
            {
                "names": ("--retirement",),
                "metavar": "DURATION",
                "show_default": False,
                "help": "The job's MaxJobRetirementTime.",
            },
            {
                "names": ("--vacate",),
                "metavar": "DURATION",
                "show_default": False,
                "help": "The job's JobMaxVacateTime.",
            },
            {
                "names": ("--pid",),
                "kind": "int",
                "min": 2,
                "show_default": False,
                "help": "Adopt this running process instead.",
            },
            {"names": ("--owner",), "show_default": False, "help": "RemoteOwner."},
            {"names": ("--job-id",), "show_default": False, "help": "JobId."},
            {
                "names": ("--group",),
                "show_default": False,
                "help": "The job group (JobGroup), e.g. www-data/prod/web.",
            },
            {
                "names": ("--kill-signal",),
                "default": "SIGTERM",
                "metavar": "SIGNAL",
                "help": "The soft-kill signal.",
            },
            {
                "names": ("--env",),
                "kind": "many",
                "metavar": "KEY=VALUE",
                "show_default": False,
                "help": "Job environment; repeat.",
            },
            {"names": ("--cwd",), "show_default": False, "help": "Job directory."},
            *_AGENT,
        ),
    },
    {
        "words": ("release",),
        "run": f"{_A}:release",
        "help": "Vacate a claim: soft-kill its job now, hard-kill it after its vacate time.",
        "argument": _CLAIM_ID,
        "options": _AGENT,
    },
    {
        "words": ("suspend",),
        "run": f"{_A}:suspend",
        "help": "SIGSTOP a claim's job; its run time stops accruing.",
        "argument": _CLAIM_ID,
        "options": _AGENT,
    },
    {
        "words": ("continue",),
        "run": f"{_A}:continue_",
        "help": "SIGCONT a suspended claim's job.",
        "argument": _CLAIM_ID,
        "options": _AGENT,
    },
    {
        "words": ("demo",),
        "run": f"{_DAEMONS}:demo",
        "plain": False,
        "help": "A master and three agents with real jobs going through a maintenance window.",
        "options": (
            {
                "names": ("--fast",),
                "kind": "flag",
                "help": "A compressed story (about 25 s) for quick checks",
            },
            {
                "names": ("--rolling",),
                "kind": "flag",
                "help": "Instead: six nodes in three racks rebooted rack by rack under an SLA",
            },
        ),
    },
    {
        "words": ("token", "create"),
        "run": "nodeagent.cli._token:create",
        "help": "Sign a bearer token with the pool key (for --host / --token).",
        "options": (
            {
                "names": ("--scope",),
                "kind": "choice",
                "choices": ("READ", "ADMINISTRATOR", "DAEMON"),
                "case_sensitive": False,
                "required": True,
                "help": "What the token allows.",
            },
            {
                "names": ("--subject",),
                "required": True,
                "help": "Who holds it (the audit log's subject).",
            },
            {
                "names": ("--lifetime",),
                "required": True,
                "metavar": "DURATION",
                "help": "How long it is valid: 90s, 15m, 2h, 30d.",
            },
            {
                "names": ("--key-file",),
                "kind": "path",
                "metavar": "PATH",
                "show_default": False,
                "help": "The pool key. Default: the daemon's key_file (<state_dir>/pool.key).",
            },
            {
                "names": ("--output", "-o"),
                "kind": "path",
                "metavar": "FILE",
                "show_default": False,
                "help": "Write the token here (mode 0600) instead of to stdout.",
            },
            {
                "names": ("--json",),
                "dest": "json_output",
                "kind": "flag",
                "help": "Print {token, subject, scope, expires_at} as one JSON document.",
            },
            {
                "names": ("--node",),
                "metavar": "HOST",
                "show_default": False,
                "help": "DAEMON only, and required: the node whose ads the token may push "
                "(the agent's hostname; defrag-<name> for a defrag daemon).",
            },
            {
                "names": ("--groups",),
                "kind": "many",
                "metavar": "PATTERN",
                "show_default": False,
                "help": "READ only: the job groups whose notices the token may answer "
                "(role/env/name, role/* or role/env/*); repeat, or separate with commas.",
            },
        ),
    },
    {
        "words": ("master", "run"),
        "run": f"{_DAEMONS}:master",
        "plain": False,
        "help": "Run the master daemon in the foreground.",
        "options": (_MASTER_CONFIG, _LOG_LEVEL),
    },
    {
        "words": ("master", "status"),
        "run": f"{_M}:status",
        "help": "The machines in maintenance and their modes (GET /maintenance/status).",
        "options": _MASTER,
    },
    {
        "words": ("master", "down"),
        "run": f"{_M}:down",
        "help": "DRAINING machines go DOWN, all or none (POST /machine/down), after a "
        "preview.\n\n"
        "Their nodes stay closed and whatever still runs is fast-drained: first what that\n"
        "evicts now (jobs, cores, promises cut), then a question (--yes: none; without a\n"
        "terminal --yes is needed, exit 6). Exits 10 when a node has not confirmed its\n"
        "drain (unreachable, lost): the master keeps trying. --wait waits for it instead.",
        "argument": _MACHINES,
        "options": (
            {"names": ("--yes", "-y"), "kind": "flag", "help": "Bring them down without asking."},
            {
                "names": ("--wait",),
                "kind": "flag",
                "help": "Wait until every node has confirmed its drain, a line per change.",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "up"),
        "run": f"{_M}:up",
        "help": "DOWN machines go UP and leave the schedule, all or none (POST /machine/up).\n\n"
        "Their nodes' drains are cancelled and they accept jobs again. Exits 10 when the\n"
        "master could not cancel a node's drain yet (unreachable): it keeps trying.",
        "argument": _MACHINES,
        "options": _MASTER,
    },
    {
        "words": ("master", "ads"),
        "run": f"{_M}:ads",
        "help": "The nodes' ads as the master holds them (GET /v1/ads): a table, -l, or --json.",
        "options": (
            {
                "names": ("--constraint",),
                "metavar": "EXPR",
                "show_default": False,
                "help": "A ClassAd expression to match.",
            },
            {
                "names": ("--projection",),
                "metavar": "A,B,...",
                "show_default": False,
                "help": "Only these attributes.",
            },
            {"names": ("--slots",), "kind": "flag", "help": "Slot ads instead of machine ads."},
            _LONG,
            *_MASTER,
        ),
    },
    {
        "words": ("master", "plan"),
        "run": f"{_M}:plan",
        "help": "The maintenance plan: a summary, or with --all every row as a timeline.\n\n"
        "The summary: counts per mode and verdict, the escalations coming (in the next hour)\n"
        "and what they cut, then the machines late by their promises or to be escalated, in\n"
        "window order (at most --limit), each with its two verdicts and the cost. With --all,\n"
        "one line per machine, printed as the master sends them: its mode, drain, window and\n"
        "planned drain start; on time, late, empty or DOWN (with --watch: the timeline).\n"
        "--window START and --machine HOST (repeatable): the plan of those machines only.\n"
        "--json prints what GET /v1/maintenance/plan answered. With --watch, one refresh\n"
        "per --interval until Ctrl-C.",
        "options": (
            _WATCH,
            {
                "names": ("--interval",),
                "default": "2s",
                "metavar": "DURATION",
                "help": "Time between refreshes with --watch.",
            },
            {
                "names": ("--all",),
                "dest": "all_rows",
                "kind": "flag",
                "help": "Every machine's row: the whole timeline.",
            },
            {
                "names": ("--limit",),
                "kind": "int",
                "min": 0,
                "default": 20,
                "help": "Late machines the summary lists (without --all).",
            },
            {
                "names": ("--window",),
                "dest": "windows",
                "kind": "many",
                "show_default": False,
                "metavar": "START",
                "help": "Only the machines of the windows starting at START (epoch seconds: "
                "a whole second selects the windows starting within it, a fraction the one "
                "starting exactly then, as the plan shows it; repeatable).",
            },
            {
                "names": ("--machine",),
                "dest": "machines",
                "kind": "many",
                "show_default": False,
                "metavar": "HOST",
                "help": "Only this machine, by hostname or IP (repeatable).",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "events"),
        "run": "nodeagent.cli._events:events",
        "help": "The master's events, one line each (GET /v1/events): time, id, type, text.\n\n"
        "Without --follow, the last --last kept events that match (or those after\n"
        "--since), then exit 0. With --follow, each new event as the master keeps it,\n"
        "until Ctrl-C (exit 0); a lost connection or a master restarted is reconnected,\n"
        "asking for the events after the last one shown, none twice. A gap (events no\n"
        "longer kept) is a warning on stderr. --json: each line as the master sends it.",
        "options": (
            {
                "names": ("--follow", "-f"),
                "kind": "flag",
                "help": "Keep printing new events until Ctrl-C.",
            },
            {
                "names": ("--since",),
                "kind": "int",
                "min": 0,
                "metavar": "ID",
                "show_default": False,
                "help": "The events after this id (instead of the last ones).",
            },
            {
                "names": ("--last",),
                "kind": "int",
                "min": 0,
                "metavar": "N",
                "show_default": False,
                "help": "The last N kept events that match first (default 20; 0: none).",
            },
            {
                "names": ("--type",),
                "dest": "types",
                "kind": "many",
                "metavar": "TYPE",
                "show_default": False,
                "help": "Only this type (drain.committed) or category (drain.*); repeat, or "
                "separate with commas.",
            },
            {
                "names": ("--machine",),
                "dest": "machines",
                "kind": "many",
                "metavar": "HOST",
                "show_default": False,
                "help": "Only the events of this machine (its hostname, or its first label); "
                "repeat.",
            },
            {
                "names": ("--group",),
                "dest": "groups",
                "kind": "many",
                "metavar": "ROLE/ENV/NAME",
                "show_default": False,
                "help": "Only the events of this job group; repeat.",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "notices"),
        "run": "nodeagent.cli._notices:notices",
        "help": "Job groups' notices of their machines' windows; an owner's answer to one.\n\n"
        "Alone: the notices in force (GET /v1/notices): id, machine, group, window,\n"
        "claims and the latest answer. --follow then prints each change\n"
        "(issued, answered, rescinded) as the master makes it, resuming after a lost\n"
        "connection or a master restarted, until Ctrl-C (exit 0). accept ID --reason\n"
        "TEXT (or decline) answers one (POST /v1/notices/ID/accept): a token answers\n"
        "for its own groups only (auth.wrong_group, exit 4); an id not in force is\n"
        "notice.no_such_notice (exit 1).",
        "argument": {
            "dest": "action",
            "many": True,
            "metavar": "[accept|decline ID]",
            "show_default": False,
            "help": "Answer notice ID; without: list the notices.",
        },
        "options": (
            {
                "names": ("--group",),
                "kind": "many",
                "metavar": "ROLE/ENV/NAME",
                "show_default": False,
                "help": "Only this job group's notices (exact); repeat, or separate with commas.",
            },
            {
                "names": ("--machine",),
                "kind": "many",
                "metavar": "HOST",
                "show_default": False,
                "help": "Only this machine's notices (its hostname, exact); repeat.",
            },
            {
                "names": ("--follow", "-f"),
                "kind": "flag",
                "help": "Then print each change until Ctrl-C.",
            },
            {
                "names": ("--reason",),
                "metavar": "TEXT",
                "show_default": False,
                "help": "accept, decline: why (required; at most 1 KiB).",
            },
            {
                "names": ("--expected-completion",),
                "metavar": "WHEN",
                "show_default": False,
                "help": "accept, decline: when the group expects its instances there to be "
                "gone: 2026-11-28T15:00Z (no zone: UTC), +2h from now, or epoch seconds.",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "ui"),
        "run": "nodeagent.cli._ui:ui",
        "help": "The live maintenance page on loopback: its URL, a browser on a terminal.\n\n"
        "The timeline of the schedule, the totals, the rolling operations and the\n"
        "events, as they change. Serves the page and forwards its reads (GET only)\n"
        "to the master, over its socket or with --token: the token stays here,\n"
        "never in a URL. Until Ctrl-C.",
        "options": (
            {
                "names": ("--listen",),
                "default": "127.0.0.1:0",
                "metavar": "HOST:PORT",
                "help": "Where to listen: a loopback address; port 0 picks a free one.",
            },
            {
                "names": ("--no-open",),
                "kind": "flag",
                "help": "Print the URL only: open no browser.",
            },
            *_MASTER[1:],
        ),
    },
    {
        "words": ("master", "schedule", "get"),
        "run": f"{_M}:schedule_get",
        "help": "The maintenance schedule: one row per window (GET /maintenance/schedule).\n\n"
        "With --json, the schedule in Mesos's JSON exactly as the master holds it, which\n"
        "schedule set takes back as it is (schedule get --json > schedule.json).",
        "options": _MASTER,
    },
    {
        "words": ("master", "schedule", "set"),
        "run": f"{_M}:schedule_set",
        "help": "Replace the schedule (POST /maintenance/schedule, Mesos rules), after its "
        "preview.\n\n"
        "First the preview of what the change does (POST\n"
        "/v1/maintenance/schedule/preview?rows=changed, nothing changed): on the machines\n"
        "it adds or moves, the drains that would start at once, each job evicted at once,\n"
        "what the escalations would cut; the machines dropped, and warnings (the kept\n"
        "machines are counted; their plan is master plan's); then Apply? [y/N]. New machines\n"
        "become DRAINING, machines left out go back UP; a DOWN machine cannot be left out.\n"
        "An invalid schedule exits 1 with Mesos's message and changes nothing. Without a\n"
        "terminal, --yes is needed (exit 6 otherwise); a window already open or times that\n"
        "look like seconds need --force as well. The schedule is applied only if the\n"
        "master's schedule and modes are still those the preview was made from (else exit\n"
        "1, schedule.changed, nothing applied: run it again to see the new preview).",
        "argument": {
            "dest": "file",
            "required": True,
            "metavar": "FILE",
            "help": "The schedule in Mesos JSON; - reads stdin.",
        },
        "options": (
            {"names": ("--yes", "-y"), "kind": "flag", "help": "Apply without asking."},
            {
                "names": ("--dry-run",),
                "kind": "flag",
                "help": "Show the preview only (with --json: the preview's JSON, the rows of "
                "the machines added or moved); exit 0.",
            },
            {
                "names": ("--force",),
                "kind": "flag",
                "help": "Apply despite a window already open or times that look wrong.",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "schedule", "clear"),
        "run": f"{_M}:schedule_clear",
        "help": "Empty the schedule (POST {}): every DRAINING machine goes back UP.\n\n"
        "Refused (exit 1) while a machine is DOWN: bring it up first.",
        "options": _MASTER,
    },
    {
        "words": ("master", "maintain", "start"),
        "run": f"{_MAINTAIN}:start",
        "help": "Start a rolling maintenance operation (POST /v1/maintenance/operations).\n\n"
        "The hosts are drained batch by batch (by host, or by the value of --grouping in\n"
        "their ads), at most --batches at once, the next batch the one whose nodes empty\n"
        "soonest; each node runs --hook once it is empty and comes back once its health\n"
        "check passes. First its preview (POST /v1/maintenance/operations/preview): its\n"
        "batches in order, each one's SLA now, each node's expected times, and when it will\n"
        "be done; then Start? [y/N] (--yes: no question; without a terminal --yes is\n"
        "needed, exit 6). With --wait, follow it as `maintain status --wait` does.",
        "options": (
            {
                "names": ("--hosts",),
                "metavar": "A,B,...",
                "show_default": False,
                "help": "The nodes, by name.",
            },
            {
                "names": ("--constraint",),
                "metavar": "EXPR",
                "show_default": False,
                "help": "Instead of --hosts: the nodes it matches.",
            },
            {
                "names": ("--grouping",),
                "default": "host",
                "metavar": "ATTR",
                "help": "host, or an ad attribute: Rack, Zone.",
            },
            {
                "names": ("--batches",),
                "kind": "int",
                "min": 1,
                "default": 1,
                "help": "Batches in progress at once.",
            },
            {
                "names": ("--hook",),
                "required": True,
                "metavar": "NAME",
                "help": "The nodes' hook to run once each is drained.",
            },
            {
                "names": ("--schedule",),
                "kind": "choice",
                "choices": ("graceful", "quick", "fast"),
                "default": "graceful",
                "help": "The drains' schedule.",
            },
            {
                "names": ("--budget",),
                "metavar": "CPU-S",
                "show_default": False,
                "help": "A batch costing more badput waits.",
            },
            {
                "names": ("--sla-wait",),
                "default": "1h",
                "metavar": "DURATION",
                "help": "How long a held batch waits before it is skipped.",
            },
            {"names": ("--yes", "-y"), "kind": "flag", "help": "Start without asking."},
            {
                "names": ("--dry-run",),
                "kind": "flag",
                "help": "Show the preview only (with --json: its JSON); exit 0.",
            },
            _WAIT,
            *_MASTER,
        ),
    },
    {
        "words": ("master", "maintain", "status"),
        "run": f"{_MAINTAIN}:status",
        "help": "An operation's batches and nodes, and why each waits; --wait: until it ends.\n\n"
        "Exits 0 only when every batch is done (completed); 10 while it runs; else 1\n"
        "(paused, cancelled, failed, or completed with skips). --wait follows it until it\n"
        "ends or pauses: a progress bar on a terminal, one line per change otherwise.\n"
        "--json prints the API's document.",
        "argument": {
            "dest": "operation_id",
            "metavar": "[ID]",
            "show_default": False,
            "help": "The operation (the newest).",
        },
        "options": (_WAIT, *_MASTER),
    },
    {
        "words": ("master", "maintain", "list"),
        "run": f"{_MAINTAIN}:list_operations",
        "help": "Every operation, newest first: its state and batches done, skipped, failed.",
        "options": _MASTER,
    },
    {
        "words": ("master", "maintain", "pause"),
        "run": f"{_MAINTAIN}:pause",
        "help": "Start no further batch (what is under way goes on).",
        "argument": _OPERATION_ID,
        "options": _MASTER,
    },
    {
        "words": ("master", "maintain", "resume"),
        "run": f"{_MAINTAIN}:resume",
        "help": "Go on with a paused operation.",
        "argument": _OPERATION_ID,
        "options": _MASTER,
    },
    {
        "words": ("master", "maintain", "cancel"),
        "run": f"{_MAINTAIN}:cancel",
        "help": "Stop: batches not started are left as they were, nodes still draining return.",
        "argument": _OPERATION_ID,
        "options": _MASTER,
    },
    {
        "words": ("master", "sla", "probe"),
        "run": "nodeagent.cli._sla:probe",
        "help": "Whether taking the hosts down now keeps every job group's SLA (GET "
        "/v1/sla/probe):\nper host group, the groups it would break and why, and the wait "
        "time to SLA.",
        "argument": {
            "dest": "hosts",
            "many": True,
            "metavar": "HOST...",
            "show_default": False,
            "help": "The nodes, by name.",
        },
        "options": (
            {
                "names": ("--constraint",),
                "metavar": "EXPR",
                "show_default": False,
                "help": "Instead of HOST...: the nodes it matches.",
            },
            {
                "names": ("--grouping",),
                "metavar": "ATTR",
                "show_default": False,
                "help": "host, or an ad attribute (Rack, Zone); default: all the hosts at once.",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "join-config"),
        "run": "nodeagent.cli._join:join_config",
        "help": "What a new agent needs to join this master: its DAEMON token and [master].\n\n"
        "Run where the master's pool key is. Writes HOST's token (bound to HOST: it may push\n"
        "HOST's ads only) to --token-file, mode 0600, and prints the lines of the agent's\n"
        "configuration: its hostname, the masters' URLs, the token file, the push interval.",
        "argument": {
            "dest": "node",
            "required": True,
            "metavar": "HOST",
            "help": "The node's name, exactly as its agent advertises it (its hostname).",
        },
        "options": (
            {
                "names": ("--master-url",),
                "metavar": "URL[,URL...]",
                "show_default": False,
                "help": "The masters as the node reaches them; default: where the master "
                "listens, unless that is loopback or a wildcard.",
            },
            {
                "names": ("--token-file", "-o"),
                "kind": "path",
                "metavar": "FILE",
                "show_default": False,
                "help": "Where to write the token (default: HOST.daemon.token here).",
            },
            {
                "names": ("--lifetime",),
                "default": "365d",
                "metavar": "DURATION",
                "help": "How long the token is valid.",
            },
            {
                "names": ("--interval",),
                "default": "60s",
                "metavar": "DURATION",
                "help": "The agent's update_interval (its pushes).",
            },
            {
                "names": ("--key-file",),
                "kind": "path",
                "metavar": "PATH",
                "show_default": False,
                "help": "The pool key. Default: the master's key_file.",
            },
            {"names": ("--force",), "kind": "flag", "help": "Replace an existing token file."},
            {
                "names": ("--json",),
                "dest": "json_output",
                "kind": "flag",
                "help": "Print the node, masters, token file and configuration as JSON.",
            },
        ),
    },
    {
        "words": ("master", "sla", "set"),
        "run": "nodeagent.cli._sla:set_policy",
        "help": "Set a job group's SLA policy (PUT /v1/sla/policies/GROUP).\n\n"
        "At least --percentage P (of --size N, or of the instances seen) or --count N\n"
        "instances up for --for DURATION, or --coordinator URL asked each time.",
        "argument": {
            "dest": "group",
            "required": True,
            "metavar": "GROUP",
            "help": "The job group (as claims name it: web/prod).",
        },
        "options": (
            {
                "names": ("--percentage",),
                "metavar": "P",
                "show_default": False,
                "help": "The share of instances that must stay up: 95 or 95%.",
            },
            {
                "names": ("--count",),
                "kind": "int",
                "min": 0,
                "show_default": False,
                "help": "How many instances must stay up.",
            },
            {
                "names": ("--coordinator",),
                "metavar": "URL",
                "show_default": False,
                "help": "Ask this URL whether the hosts may go (http or https).",
            },
            {
                "names": ("--for",),
                "dest": "up_for",
                "metavar": "DURATION",
                "show_default": False,
                "help": "How long an instance must have been up to count: 30m, 2h.",
            },
            {
                "names": ("--size",),
                "kind": "int",
                "min": 1,
                "show_default": False,
                "help": "The group's size (default: the instances seen).",
            },
            *_MASTER,
        ),
    },
    {
        "words": ("master", "sla", "get"),
        "run": "nodeagent.cli._sla:get",
        "help": "A job group's SLA policy in force (GET /v1/sla/policies/GROUP).",
        "argument": {"dest": "group", "required": True, "metavar": "GROUP", "help": "The group."},
        "options": _MASTER,
    },
    {
        "words": ("master", "sla", "list"),
        "run": "nodeagent.cli._sla:list_policies",
        "help": "Every SLA policy in force, and where it comes from (api or file).",
        "options": _MASTER,
    },
    {
        "words": ("master", "sla", "delete"),
        "run": "nodeagent.cli._sla:delete",
        "help": "Remove a group's policy set over the API (the file's, if any, applies again).",
        "argument": {"dest": "group", "required": True, "metavar": "GROUP", "help": "The group."},
        "options": _MASTER,
    },
    {
        "words": ("defrag", "run"),
        "run": f"{_DAEMONS}:defrag",
        "plain": False,
        "help": "Run the defrag daemon in the foreground.",
        "options": (_DEFRAG_CONFIG, _LOG_LEVEL),
    },
    {
        "words": ("defrag", "status"),
        "run": "nodeagent.cli._defrag:status",
        "help": "Show the defrag daemon's statistics (GET /v1/stats).",
        "json_errors": False,  # --json re-encodes the reply: an error body is not printed
        "options": (
            _DEFRAG_CONFIG,
            {
                "names": ("--host",),
                "envvar": "NODEAGENT_DEFRAG_HOST",
                "help": "The daemon's TCP address (http://HOST[:PORT], port 9623 by default); "
                "default: its Unix socket",
            },
            {
                "names": ("--token",),
                "envvar": "NODEAGENT_DEFRAG_TOKEN_FILE",
                "help": "File holding a READ token (with --host)",
            },
            {
                "names": ("--socket",),
                "dest": "socket_path",
                "help": "The daemon's Unix socket (default from the config)",
            },
            {
                "names": ("--json",),
                "dest": "json_output",
                "kind": "flag",
                "help": "Print exactly the API's JSON.",
            },
            {
                "names": ("--long", "-l"),
                "kind": "flag",
                "help": "Print the Defrag ad in ClassAd long form.",
            },
        ),
    },
)
"""Every command, in the order of ``--help``."""
