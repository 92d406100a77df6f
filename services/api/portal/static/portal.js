// The portal's few behaviours: the theme toggle, refusals shown in the notice area, and
// charts (uPlot) drawn from the JSON a page embeds. Everything else is htmx attributes.
(function () {
  "use strict";

  function currentTheme() {
    var set = document.documentElement.dataset.theme;
    if (set) return set;
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-theme-toggle]");
    if (!toggle) return;
    var next = currentTheme() === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try { localStorage.setItem("corral-theme", next); } catch (e) { /* storage off */ }
    redrawCharts();
  });

  // A refusal to an htmx request (403, 404, 409, 422...) is a notice fragment: show it
  // rather than swapping it into the panel that asked.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (xhr.status >= 400) {
      event.detail.shouldSwap = false;
      var notice = document.getElementById("notice");
      if (notice) notice.innerHTML = xhr.responseText;
    }
  });
  document.addEventListener("htmx:sendError", function () {
    var notice = document.getElementById("notice");
    if (notice) notice.innerHTML = '<div class="notice error" role="alert">Corral did not answer; check your connection. The page will catch up when it is back.</div>';
  });

  // Charts: <div class="chart" data-chart='{"title":..., "unit":..., "x":[unix s...],
  // "series":[{"label":..., "values":[...]}]}'>. Drawn on load and after every swap.
  var charts = [];

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function drawChart(el) {
    if (typeof uPlot === "undefined") return;
    var spec = JSON.parse(el.dataset.chart);
    el.innerHTML = "";
    var palette = [cssVar("--chart-1"), cssVar("--chart-2"), cssVar("--chart-3"), cssVar("--chart-4")];
    var axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--grid") }, ticks: { stroke: cssVar("--grid") } };
    var opts = {
      title: spec.title || "",
      width: Math.max(240, el.clientWidth || 600),
      height: spec.height || 220,
      series: [{}].concat(spec.series.map(function (s, i) {
        return { label: s.label, stroke: palette[i % palette.length], width: 2,
                 value: function (u, v) { return v == null ? "—" : v.toFixed(spec.decimals || 0) + (spec.unit || ""); } };
      })),
      axes: [Object.assign({}, axis), Object.assign({ label: spec.unit || "" }, axis)],
      scales: spec.max ? { y: { range: [0, spec.max] } } : {},
    };
    var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    var plot = new uPlot(opts, data, el);
    charts.push({ el: el, plot: plot });
  }

  function drawCharts(root) {
    charts = charts.filter(function (c) { return document.body.contains(c.el); });
    (root || document).querySelectorAll(".chart[data-chart]").forEach(drawChart);
  }

  function redrawCharts() {
    var els = charts.map(function (c) { c.plot.destroy(); return c.el; });
    charts = [];
    els.forEach(function (el) { if (document.body.contains(el)) drawChart(el); });
  }

  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); });
  document.addEventListener("htmx:afterSettle", function (event) { drawCharts(event.detail.elt); });
  window.addEventListener("resize", function () { clearTimeout(window.__corralResize); window.__corralResize = setTimeout(redrawCharts, 200); });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redrawCharts);
})();
