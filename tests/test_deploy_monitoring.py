"""deploy/prometheus and deploy/grafana: the alerting rules and the dashboard parse, and every
metric they name is one the receiver or `ledgerlake metrics` exports (their registries,
collected here over a real inbox and an in-memory Dagster instance), so a renamed metric
fails here, not silently in a team's Prometheus."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "ledgerlake-rules.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "ledgerlake.json"
METRIC = re.compile(r"\bledgerlake_[a-z0-9_]+\b")
# Prometheus's own series, which a rule may name beside ours
PROMETHEUS = {"up"}
DURATION = re.compile(r"^\d+[smhdw]$")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> set[str]:
    """Every sample name the two registries export."""
    import dagster as dg

    from pipeline.metrics import registry
    from pipeline.receiver import ReceiverMetrics
    from resources.config import Settings
    from tests.conftest import connected

    home = tmp_path_factory.mktemp("monitoring")
    connected(home / "inbox.sqlite3", ["rec1"])
    with socket.socket() as s:  # LEDGERLAKE_RECEIVER_URL, closed: receiver_healthy is 0
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    settings = Settings.from_env({"LEDGERLAKE_HOME": str(home),
                                  "LEDGERLAKE_RECEIVER_URL": closed})
    receiver = ReceiverMetrics()
    receiver.answered("stored", "ACCOUNTS")  # a labelled series exists once it counted
    names = set()
    with dg.DagsterInstance.ephemeral() as instance:
        from resources.inbox import LANDED_OK, LandingState, open_inbox

        with open_inbox(home / "inbox.sqlite3") as db:  # a landing, so ages are exported
            db.save_landings([LandingState("rec1", "balances", LANDED_OK, "run-1", 1.0)])
        for reg in (receiver.registry, registry(lambda: instance, settings)):
            for family in reg.collect():
                names |= {s.name for s in family.samples}
    return names


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_rules_parse_as_prometheus_rule_groups():
    doc = yaml.safe_load(RULES.read_text())
    assert [g["name"] for g in doc["groups"]] == ["ledgerlake"]
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names)) and all(n.startswith("Ledgerlake") for n in names)
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("page", "ticket")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert "for" not in rule or DURATION.match(rule["for"]), rule["alert"]
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]")
        assert expr.count("{") == expr.count("}"), rule["alert"]


def test_every_metric_the_rules_name_exists(exported):
    named = {m for rule in rules() for m in METRIC.findall(rule["expr"])}
    assert named and named <= exported, sorted(named - exported)
    for rule in rules():  # a bare name of ours, or Prometheus's own
        words = set(re.findall(r"\b([a-z_]+)\{", rule["expr"])) - set(METRIC.findall(
            rule["expr"]))
        assert words <= PROMETHEUS, (rule["alert"], words)


def test_the_rules_cover_the_alerts_incidents():
    """Each incident the alerts sensor posts has a rule (a run of another job failing shows
    as its job's staleness: a warehouse not built, a refresh missed)."""
    covered = {"failed": "LedgerlakeRecordsFailed", "held": "LedgerlakeRecordsHeld",
               "stale": "LedgerlakeRecordsStale", "quiet": "LedgerlakeCallbacksQuiet",
               "behind": "LedgerlakeInboxSensorBehind",
               "dead_letters": "LedgerlakeDeadLettersGrowing",
               "receiver": "LedgerlakeReceiverUnhealthy", "inbox": "LedgerlakeInboxDown",
               "run": "LedgerlakeWarehouseStale"}
    # the incidents as docs/operations.md's "Alerts" table lists them, one row each
    alerts = (REPO / "docs/operations.md").read_text().split("### Alerts", 1)[1]
    told = set(re.findall(r"^\| `(\w+)[:`]", alerts.split("\n#", 1)[0], re.M))
    assert told == set(covered)
    assert set(covered.values()) <= {r["alert"] for r in rules()}


def test_the_dashboard_parses_and_names_only_exported_metrics(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert dashboard["uid"] == "ledgerlake" and exprs
    named = {m for e in exprs for m in METRIC.findall(e)}
    assert named <= exported, sorted(named - exported)
    # every metric the two processes export is on the dashboard (histograms by their parts)
    def family(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|created|total)$", "", name)

    families, shown = {family(n) for n in exported}, {family(n) for n in named}
    assert families - shown <= {"ledgerlake_inbox_events", "ledgerlake_records_landed",
                                "ledgerlake_receiver_callbacks_in_flight"}


def test_the_operations_guide_tells_every_metric_incident_and_setting(exported):
    """docs/operations.md, "Alerts and metrics", is the code's: each metric exported, each
    incident the sensor judges and each alert setting, and nothing else of ours."""
    from pipeline import alerts

    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("## Alerts and metrics", 1)[1].split("\n## ", 1)[0]

    def family(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|created)$", "", name)

    documented = {family(m) for m in METRIC.findall(section)}
    assert {family(n) for n in exported if not n.endswith("_created")} - documented == set()
    assert documented - {family(n) for n in exported} == set()
    for kind in re.findall(r"^- `(\w+)", alerts.__doc__, re.M):
        assert f"| `{kind}" in section, kind
    for var in ("LEDGERLAKE_ALERT_URL", "LEDGERLAKE_ALERT_FORMAT",
                "LEDGERLAKE_ALERT_QUIET_MINUTES", "LEDGERLAKE_ALERT_BACKLOG_MINUTES",
                "LEDGERLAKE_ALERT_MAX_PER_HOUR", "LEDGERLAKE_RECEIVER_URL",
                "LEDGERLAKE_DAGSTER_URL"):
        assert f"| `{var}` |" in text, var
    assert f"every {alerts.INTERVAL_S} s" in section
