"""The routing file: validation that names line and field, route choice, hot reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.alerter.routing import RoutingError, RoutingFile, parse_routing

GOOD = """\
receivers:
  - name: oncall
    pagerduty: {routing_key: abc, url: "http://127.0.0.1:9/pd"}
  - name: chat
    slack: {url: "http://127.0.0.1:9/slack"}
  - name: tools
    webhook: {url: "http://127.0.0.1:9/hook"}
route:
  receiver: tools
  routes:
    - match: {severity: critical}
      receivers: [oncall, chat]
    - match: {rule: JobFailed}
      receiver: chat
"""


def test_routes_pick_the_first_matching_child_else_the_default() -> None:
    routing = parse_routing(GOOD)

    def names(labels: dict[str, str]) -> list[str]:
        return [r.name for r in routing.receivers_for(labels)]

    assert names({"severity": "critical", "rule": "JobFailed"}) == ["oncall", "chat"]
    assert names({"severity": "warning", "rule": "JobFailed"}) == ["chat"]
    assert names({"severity": "warning", "rule": "NodeUnreachable"}) == ["tools"]
    assert parse_routing("").receivers_for({"severity": "critical"}) == []


def test_grouping_is_inherited_down_the_tree_and_durations_read_as_alertmanager_writes_them() -> None:
    routing = parse_routing(
        GOOD.replace(
            "  receiver: tools\n", "  receiver: tools\n  group_wait: 10s\n  repeat_interval: 1h30m\n"
        )
        + "      group_by: [node]\n      group_interval: 5m\n"
    )
    job = routing.route.grouping({"rule": "JobFailed", "node": "n1", "severity": "warning"}, "JobFailed/j1/0")
    assert job.key == '{}/{rule="JobFailed"}:{node="n1"}'
    assert job.labels == {"node": "n1"}
    assert (job.wait_s, job.interval_s, job.repeat_s) == (10.0, 300.0, 5400.0)
    other = routing.route.grouping({"rule": "NodeUnreachable", "severity": "warning"}, "NodeUnreachable/n2")
    assert other.key == '{}:{fingerprint="NodeUnreachable/n2"}'  # the default: every alert alone
    assert (other.wait_s, other.interval_s, other.repeat_s) == (10.0, 0.0, 5400.0)
    assert parse_routing("").route.grouping({}, "f").repeat_s == 4 * 3600


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("routing_key: abc", "routing_key: ''"), "line 3, receivers.0.pagerduty.routing_key"),
        (GOOD.replace('url: "http://127.0.0.1:9/slack"', "url: not-a-url"), "line 5, receivers.1.slack.url"),
        (GOOD.replace("    webhook:", "    sms:"), "line 7, receivers.2.sms: Extra inputs"),
        (
            GOOD.replace("    webhook: {url:", "    email: {to: [x@y.z], url:"),
            "line 7, receivers.2.email.from_address: Field required",
        ),
        (GOOD.replace("receivers: [oncall, chat]", "receivers: [oncall, pager]"), "not defined: ['pager']"),
        ("receivers: [\n", "not valid YAML"),
        (GOOD + "  group_wait: 5 minutes\n", "line 15, route.group_wait: Value error, '5 minutes' is not"),
        (GOOD + "  repeat_interval: 0s\n", "line 15, route.repeat_interval: Input should be greater than 0"),
        (GOOD + "  group_by: node\n", "line 15, route.group_by: Input should be a valid list"),
    ],
)
def test_a_bad_file_is_refused_naming_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(RoutingError) as refused:
        parse_routing(text, "routing.yaml")
    assert expected in str(refused.value)
    assert "routing.yaml" in str(refused.value)


def test_the_file_is_reloaded_and_a_bad_edit_keeps_the_routing_in_force(tmp_path: Path) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(GOOD)
    live = RoutingFile(path)
    assert [r.name for r in live.routing.receivers] == ["oncall", "chat", "tools"]
    assert not live.reload()  # unchanged
    path.write_text(GOOD.replace("name: tools", "name: tools!"))
    assert not live.reload()
    assert live.error is not None
    assert "receivers.2.name" in live.error
    assert [r.name for r in live.routing.receivers] == ["oncall", "chat", "tools"]
    path.write_text(
        GOOD.replace("name: tools\n", "name: tooling\n").replace("receiver: tools", "receiver: tooling")
    )
    assert live.reload()
    assert [r.name for r in live.routing.receivers] == ["oncall", "chat", "tooling"]
    assert not live.error
