"""The Grafana dashboard ``deploy/grafana/corral.json`` against the metrics the services
actually expose: every metric a panel queries exists, and every metric Corral defines
has a panel.

The exposed names come from the code, not from a list kept here: importing
``shared.metrics`` and each ``services/<name>/metrics.py`` registers their metrics in
prometheus_client's default registry, whose families give the sample names a scrape
shows (``_total`` for a counter; ``_bucket``, ``_count``, ``_sum`` for a histogram). The
monitor writes its GPU and node series by hand (services/monitor/metrics.py): its
``exposition`` run over no GPUs still writes every family's header, which gives those.
PromQL is parsed only as far as naming the series a query reads: strings, label
matchers, ranges, grouping clauses and Grafana variables are set aside, an identifier
followed by ``(`` is a function (checked against PromQL's), any other is a metric.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import re
from collections.abc import Iterable, Iterator
from types import ModuleType

import pytest
from prometheus_client import REGISTRY, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from services.monitor import metrics as monitor_metrics
from services.monitor.ingest import IngestCounters
from tests.deploy.render import DEPLOY, OVERLAYS, ROOT, Obj, of_kind, render, workloads

DASHBOARD = DEPLOY / "grafana" / "corral.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# Series Prometheus writes itself for every target, not any service.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Grafana's built-in variables ($__rate_interval, $__range, …) need no definition.
GRAFANA_GLOBAL = re.compile(r"__\w+")

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
    "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
    "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
    "tanh", "time", "timestamp", "vector", "year",
}  # fmt: skip
# Words of the language that stand alone (by, without, on, ignoring go with their lists;
# group_left and group_right may come without one).
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "group_left", "group_right"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*(=~|=)\s*"((?:[^"\\]|\\.)*)"')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLE = re.compile(r"\$(?:\{[^}]*\}|\w+)")
_WORD = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.DOTALL)
_JOB_MATCHER = re.compile(r'\bjob\s*(=~|=)\s*"([^"]*)"')


# --- the dashboard ---------------------------------------------------------------------


@functools.cache
def dashboard() -> Obj:
    loaded: Obj = json.loads(DASHBOARD.read_text())
    return loaded


def all_panels(panels: Iterable[Obj]) -> Iterator[Obj]:
    """Every panel, those inside a collapsed row included."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            match = _LABEL_VALUES.match(text)
            yield f"variable {variable['name']}", match.group(1) if match else text


def panel_queries() -> Iterator[tuple[str, str]]:
    return ((where, expr) for where, expr in queries() if where.startswith("panel "))


# --- PromQL, as far as the metric names ------------------------------------------------


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, function names) a PromQL expression uses."""
    metrics: set[str] = set()
    for op, value in _NAME_MATCHER.findall(expr):
        assert op == "=" or re.fullmatch(r"[\w:|]+", value), f"a __name__ regex too clever to read: {value}"
        metrics |= set(value.split("|"))
    text = _STRING.sub('""', expr)
    text = _VARIABLE.sub("", text)
    while _BRACES.search(text):
        text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    functions: set[str] = set()
    for word, call in _WORD.findall(text):
        if call:
            functions.add(word)
        elif word not in KEYWORDS:
            metrics.add(word)
    return metrics, functions


def test_the_promql_reader() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (route, le) (rate(corral_http_request_duration_seconds_bucket"
        '{route!~"/healthz|/readyz", job=~"$job"}[$__rate_interval]))) / on (le) group_left '
        '1e6 * max without (instance, pod) (DCGM_FI_DEV_GPU_UTIL{node="a{b}"} offset 5m) > bool 1 '
        'or vector(0) unless {__name__=~"corral_a|corral_b"}'
    )
    metrics, functions = names_in(expr)
    assert metrics == {
        "corral_http_request_duration_seconds_bucket",
        "DCGM_FI_DEV_GPU_UTIL",
        "corral_a",
        "corral_b",
    }
    assert functions == {"histogram_quantile", "sum", "rate", "max", "vector"}


# --- what the services expose ----------------------------------------------------------


def sample_names(family: Metric) -> set[str]:
    """The names a family's samples carry in a scrape, whether or not it has any yet."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
        "summary": ("", "_count", "_sum"),
        "info": ("_info",),
    }.get(family.type, ("",))
    return {family.name + suffix for suffix in suffixes} | {sample.name for sample in family.samples}


def metrics_modules() -> list[ModuleType]:
    """shared/metrics.py and every services/<name>/metrics.py, imported (which registers
    their metrics in the default registry)."""
    names = ["shared.metrics"] + [
        f"services.{path.parent.name}.metrics" for path in sorted((ROOT / "services").glob("*/metrics.py"))
    ]
    return [importlib.import_module(name) for name in names]


def defined_families(module: ModuleType) -> list[Metric]:
    """The metrics a module defines as prometheus_client objects."""
    return [
        family
        for value in vars(module).values()
        if isinstance(value, MetricWrapperBase)
        for family in value.describe()
    ]


@functools.cache
def monitor_families() -> tuple[Metric, ...]:
    """The monitor's hand-written families, from the code that writes them: with no GPU
    rows every family still writes its HELP and TYPE."""
    text = asyncio.run(monitor_metrics.exposition([], IngestCounters()))
    return tuple(text_string_to_metric_families(text))


def monitor_cluster_wide() -> set[str]:
    """The monitor's series read from Postgres, the same on every replica: all of its
    families but its own ingest counters."""
    own = {name for name, _, _ in monitor_metrics.COUNTERS}
    return {name for f in monitor_families() for name in sample_names(f)} - own


@functools.cache
def exposed() -> frozenset[str]:
    metrics_modules()
    names: set[str] = set()
    for family in REGISTRY.collect():  # shared + services + the process collectors
        names |= sample_names(family)
    for family in monitor_families():
        names |= sample_names(family)
    return frozenset(names)


def test_the_monitors_names_come_from_its_code() -> None:
    names = {name for f in monitor_families() for name in sample_names(f)}
    # The tables the exposition iterates, and the families it writes by name besides.
    assert {name for name, _, _, _ in monitor_metrics.GAUGES} <= names
    assert {name for name, _, _ in monitor_metrics.COUNTERS} <= names
    assert {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "corral_gpu_lost", "corral_node_ready"} <= names


# --- the dashboard's shape -------------------------------------------------------------


def test_the_dashboard_is_an_importable_dashboard() -> None:
    board = dashboard()
    assert board["title"]
    assert board["uid"] == "corral"
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    # The data source is a variable, so the file imports as it is (UI or provisioning).
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["virtual_cluster"]["type"] == "query"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE


def test_panel_ids_are_unique_and_the_panels_do_not_overlap() -> None:
    panels = list(all_panels(dashboard()["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    boxes = []
    for panel in panels:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] < pos["x"] + pos["w"] <= 24, panel["title"]
        boxes.append((panel["title"], pos["x"], pos["y"], pos["x"] + pos["w"], pos["y"] + pos["h"]))
    for i, (a, ax0, ay0, ax1, ay1) in enumerate(boxes):
        for b, bx0, by0, bx1, by1 in boxes[i + 1 :]:
            assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, f"{a!r} overlaps {b!r}"


def test_every_panel_queries_prometheus_with_a_unit_a_legend_and_a_description() -> None:
    for panel in all_panels(dashboard()["panels"]):
        if panel["type"] == "row":
            continue
        what = panel["title"]
        assert panel["datasource"] == DATASOURCE, what
        assert panel.get("description"), f"{what} says nothing of what it shows"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{what} has no unit"
        targets = panel["targets"]
        assert targets, f"{what} has no query"
        assert len({t["refId"] for t in targets}) == len(targets), what
        for target in targets:
            assert target["expr"].strip(), what
            assert target.get("datasource", DATASOURCE) == DATASOURCE, what
            assert target.get("legendFormat"), f"{what} {target['refId']}: no legend"


def test_every_variable_a_query_uses_is_defined() -> None:
    defined = {v["name"] for v in dashboard()["templating"]["list"]}
    for where, expr in queries():
        for variable in re.findall(r"\$\{?(\w+)", expr):
            assert variable in defined or GRAFANA_GLOBAL.fullmatch(variable), f"{where}: ${variable}"


# --- every metric queried exists, every metric defined is charted ---------------------


def test_every_metric_a_query_reads_is_one_a_service_exposes() -> None:
    known = exposed() | PROMETHEUS_OWN
    checked = 0
    for where, expr in queries():
        metrics, functions = names_in(expr)
        assert metrics, f"{where} reads no metric: {expr}"
        unknown = metrics - known
        assert not unknown, f"{where} reads {sorted(unknown)}, which no Corral service exposes"
        odd = functions - FUNCTIONS - AGGREGATIONS
        assert not odd, f"{where} calls {sorted(odd)}, which PromQL does not have"
        checked += len(metrics)
    assert checked >= 50


@pytest.mark.parametrize("module", metrics_modules(), ids=lambda m: m.__name__)
def test_every_metric_a_service_defines_has_a_panel(module: ModuleType) -> None:
    read = set().union(*(names_in(expr)[0] for _, expr in panel_queries()))
    # The monitor's GPU and node series are written by hand, the others are objects.
    families = list(monitor_families()) if module is monitor_metrics else defined_families(module)
    assert families, f"{module.__name__} defines no metric"
    uncharted = [f.name for f in families if not sample_names(f) & read]
    assert not uncharted, f"no panel of {DASHBOARD.name} shows {uncharted} ({module.__name__})"


def test_the_monitors_cluster_wide_series_are_counted_once() -> None:
    """Every monitor replica serves every GPU: a panel that sums them unreduced would
    count each GPU once per replica."""
    cluster_wide = monitor_cluster_wide()
    for where, expr in panel_queries():
        if names_in(expr)[0] & cluster_wide:
            assert "max without (instance, pod)" in expr, f"{where} does not reduce the replicas: {expr}"
            assert 'job="corral-monitor"' in expr, f"{where} may mix in another exporter's DCGM series"


def scrape_jobs() -> set[str]:
    """The job label each Corral target gets: the PodMonitor's jobLabel, read off the
    pods it scrapes."""
    (monitor,) = of_kind(render("production"), "PodMonitor")
    label = monitor["spec"]["jobLabel"]
    return {
        obj["spec"]["template"]["metadata"]["labels"][label]
        for overlay in OVERLAYS
        for obj in workloads(render(overlay))
    }


def test_the_jobs_a_query_selects_are_the_ones_the_podmonitor_names() -> None:
    jobs = scrape_jobs()
    for where, expr in queries():
        for op, value in _JOB_MATCHER.findall(_VARIABLE.sub("", expr)):
            if op == "=":
                assert value in jobs, f"{where}: no target has job={value!r} (jobs: {sorted(jobs)})"
            else:
                matched = {job for job in jobs if re.fullmatch(value, job)}
                assert matched == jobs, f"{where}: job=~{value!r} misses {sorted(jobs - matched)}"


def test_the_readme_says_how_to_import_it() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert "deploy/grafana/corral.json" in readme
