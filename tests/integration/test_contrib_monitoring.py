"""The Grafana dashboard and the Prometheus alert rules of contrib/, against a real master.

``promtool`` (Debian's prometheus package, installed by ``scripts/ensure-prometheus``)
checks the rules, runs their unit tests (``alerts_test.yml``) and parses every expression
of the dashboard; a test without it skips, except in CI (``$CI`` set), where it fails.
Every metric name the rules and the dashboard use is one a real master exports on
``/metrics``: a master with two agents on loopback, one of them late for its window (a
job promised 10 minutes, its window 2 minutes away), scraped once for the whole file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import MasterProcess, job_script, wait_for
from tests.integration.test_master import agents_for, window

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "alerts.yml"
RULES_TESTS = ROOT / "contrib" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "nodeagent.json"

# ------------------------------------------------------------------ names, loosely


_NAME = re.compile(r"(?<![A-Za-z0-9_:])nodeagent_[A-Za-z0-9_:]*")


def used_names(expression: str) -> set[str]:
    """The metric names an expression names: identifiers starting ``nodeagent_`` (PromQL
    read loosely: a label, a function or a keyword never starts so)."""
    return set(_NAME.findall(expression))


def exported_names(exposition: str) -> set[str]:
    """The names a query may use for what ``exposition`` (Prometheus text) exports: every
    sample's name, and for every family, even one without a sample: a gauge's or an
    untyped one's name, a counter's with ``_total``, a histogram's ``_bucket``, ``_sum``
    and ``_count``, a summary's name, ``_sum`` and ``_count``."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
            elif kind == "histogram":
                names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            elif kind == "summary":
                names.update(f"{name}{suffix}" for suffix in ("", "_sum", "_count"))
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("max by (mode) (nodeagent_master_machines)", {"nodeagent_master_machines"}),
        (
            'max(increase(nodeagent_master_drains_escalated_total{job=~"$job"}[5m])) > 0',
            {"nodeagent_master_drains_escalated_total"},
        ),
        (
            "histogram_quantile(0.9, sum by (le) (rate(nodeagent_master_http_seconds_bucket[1m])))",
            {"nodeagent_master_http_seconds_bucket"},
        ),
        (
            "a_nodeagent_x + nodeagent_a and on (url) nodeagent_b:rate5m",
            {"nodeagent_a", "nodeagent_b:rate5m"},
        ),
        ("time() - max(up)", set()),
    ],
)
def test_used_names_are_the_identifiers_starting_nodeagent(
    expression: str, names: set[str]
) -> None:
    assert used_names(expression) == names


def test_exported_names_follow_the_suffix_rules() -> None:
    exposition = (
        "# HELP g A gauge\n# TYPE g gauge\n"
        "# HELP c A counter without a sample\n# TYPE c counter\n"
        "# HELP d_total A counter, as newer clients write it\n# TYPE d_total counter\n"
        "# HELP h A histogram\n# TYPE h histogram\n"
        'h_bucket{le="1.0"} 1.0\nh_bucket{le="+Inf"} 1.0\nh_count 1.0\nh_sum 0.5\n'
        "# HELP s A summary\n# TYPE s summary\n"
        'g{state="x"} 1.0\nc_created 1.7e9\n'
    )
    assert exported_names(exposition) == {
        "g",
        "c_total",
        "c_created",
        "d_total",
        "h_bucket",
        "h_sum",
        "h_count",
        "s",
        "s_sum",
        "s_count",
    }


# ------------------------------------------------------------------ the files' expressions


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def dashboard_expressions() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' queries and its variables'."""
    dashboard = _dashboard()
    expressions = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", ())]
    for variable in dashboard["templating"]["list"]:
        expressions.append(variable["definition"])
    return expressions


def rule_texts() -> list[str]:
    """Every rule's expression and annotations (which name metrics to look at)."""
    return [
        text for rule in _rules() for text in (rule["expr"], *rule.get("annotations", {}).values())
    ]


def have_promtool() -> str:
    """promtool's path; skips (fails in CI) when it is not installed."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI: scripts/ensure-prometheus should install it")
        pytest.skip(
            "promtool is not installed (Debian package prometheus; scripts/ensure-prometheus)"
        )
    return path


def promtool(*args: str, cwd: Path | None = None) -> None:
    """Run promtool (see :func:`have_promtool`); fails the test with its output when it
    says no."""
    result = subprocess.run(
        [have_promtool(), *args], check=False, capture_output=True, text=True, cwd=cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("present", "stderr"),
    [
        (["promtool"], ""),
        ([], "ensure-prometheus: promtool is missing and we are not root; install: prometheus\n"),
    ],
    ids=["present", "missing"],
)
def test_ensure_prometheus_without_root_only_says_what_is_missing(
    tmp_path: Path, present: list[str], stderr: str
) -> None:
    """A stand-in ``id`` says uid 1000; the commands found are stand-ins on a PATH of their
    own: nothing is installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in [*((n, "exit 0") for n in present), ("id", "echo 1000")]:
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", str(ROOT / "scripts" / "ensure-prometheus")],
        env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, stderr)


def test_the_alert_rules_pass_promtool_check() -> None:
    promtool("check", "rules", str(RULES))


def test_the_alert_rules_pass_their_unit_tests() -> None:
    promtool("test", "rules", RULES_TESTS.name, cwd=RULES_TESTS.parent)


def test_every_alert_says_what_it_is_and_what_to_do() -> None:
    rules = _rules()
    assert {rule["alert"] for rule in rules} >= {
        "NodeagentMachineLate",
        "NodeagentEscalationWithinHour",
        "NodeagentDrainEscalated",
        "NodeagentHookFailed",
        "NodeagentHealthCheckFailing",
        "NodeagentNoLeader",
        "NodeagentNodeLost",
        "NodeagentWebhookBehind",
        "NodeagentAdsBehind",
    }
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]


def test_every_dashboard_expression_is_promql(tmp_path: Path) -> None:
    """Each expression, its Grafana variables given values, as a recording rule that
    promtool parses."""
    rules = [
        {
            "record": f"dashboard:expression_{i}",
            "expr": expression.replace("$__rate_interval", "5m").replace("$job", ".*"),
        }
        for i, expression in enumerate(dashboard_expressions())
        if not expression.startswith("label_values(")
    ]
    path = tmp_path / "dashboard.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    promtool("check", "rules", str(path))


def test_the_dashboard_is_importable_with_a_prometheus_datasource_input() -> None:
    dashboard = _dashboard()
    (source,) = dashboard["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == (
        "DS_PROMETHEUS",
        "datasource",
        "prometheus",
    )
    assert dashboard["uid"]
    assert dashboard["title"]
    panels = list(_panels(dashboard))
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    (variable,) = dashboard["templating"]["list"]
    assert variable["datasource"]["uid"] == "${DS_PROMETHEUS}"


# ------------------------------------------------------------------ against a real master


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A master, two agents, one of them late for its window, scraped once its late
    machine shows; with the plan read just before."""
    tmp = tmp_path_factory.mktemp("monitoring")
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    policy = {"max_job_retirement_time": 600, "machine_max_vacate_time": 1}
    names = ["late.test", "ontime.test"]
    with (
        MasterProcess(tmp / "master", settings=settings) as master,
        agents_for(master, tmp, names, policy) as (late, on_time),
    ):
        argv, _ = job_script(tmp, "long")
        late.claim(argv, cpus=2, max_job_retirement_time=600, job_id="7", owner="alice")
        on_time.claim(job_script(tmp, "short")[0], max_job_retirement_time=3)
        master.call("POST", "/maintenance/schedule", json=window(names, time.time() + 120))

        def late_shown() -> tuple[str, dict[str, Any]] | None:
            plan = master.call("GET", "/v1/maintenance/plan").json()
            text = master.call("GET", "/metrics").text
            shown = 'nodeagent_master_machine_late_seconds{machine="late.test"' in text
            return (text, plan) if shown and plan["totals"]["late"] == 1 else None

        text, plan = wait_for(late_shown)
        yield {"text": text, "plan": plan}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_late_machine_and_its_escalation_are_exported_as_the_plan_says(
    scraped: dict[str, Any],
) -> None:
    samples = _samples(scraped["text"])
    (row,) = [m for m in scraped["plan"]["machines"] if m["machine_id"]["hostname"] == "late.test"]
    late = samples[
        ("nodeagent_master_machine_late_seconds", (("machine", "late.test"), ("node", "late.test")))
    ]
    assert late > 400  # about 480 s: a promise of 10 minutes, a window in 2
    assert late == pytest.approx(row["late_by"], abs=5)  # read at another instant
    assert samples[("nodeagent_master_machines_late", ())] == 1
    assert samples[("nodeagent_master_plan_machines_behind", ())] == 0  # a small pool: whole
    assert samples[("nodeagent_master_escalations_planned", ())] == 1
    labels = (("escalation", "quick"), ("machine", "late.test"), ("node", "late.test"))
    assert samples[("nodeagent_master_escalation_cut_jobs", labels)] == 1
    assert samples[
        ("nodeagent_master_escalation_window_start_timestamp_seconds", labels)
    ] == pytest.approx(row["window"]["start"])
    drain_states = [
        v for (n, _), v in samples.items() if n == "nodeagent_master_nodes_by_drain_state"
    ]
    assert sum(drain_states) == 2  # both nodes, live
    assert (
        samples[("nodeagent_master_expected_badput_cpu_seconds", (("schedule", "graceful"),))] > 0
    )


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_the_files_use_is_exported_by_a_master(
    scraped: dict[str, Any], source: str
) -> None:
    texts = rule_texts() if source == "rules" else dashboard_expressions()
    used = set().union(*(used_names(text) for text in texts))
    assert used
    missing = sorted(used - exported_names(scraped["text"]))
    assert not missing, f"used, not exported: {', '.join(missing)}"
