// The dashboard's only script of its own: it draws an event's chart from the JSON in its
// data-chart attribute (no inline script: the Content Security Policy allows 'self' only),
// again after each refresh of the page's live part. Pages work without it.
(function () {
  "use strict";

  function draw(root) {
    var box = (root || document).querySelector("#chart[data-chart]");
    if (!box || !window.uPlot || box.dataset.drawn) return;
    var data = JSON.parse(box.dataset.chart);
    box.dataset.drawn = "1";
    if (!data.t.length) {
      box.textContent = "No runs to chart.";
      return;
    }
    // One run alone would stretch the time axis over years: ten minutes around a few runs
    // close together, and a margin around many.
    var lo = data.t[0], hi = data.t[data.t.length - 1];
    var margin = Math.max((hi - lo) * 0.05, (600 - (hi - lo)) / 2);
    lo -= margin;
    hi += margin;
    var options = {
      width: Math.max(320, box.clientWidth || 800),
      height: 220,
      scales: { x: { time: true, auto: false, range: [lo, hi] } },
      series: [
        {},
        { label: "duration (s)", stroke: "#2a6fdb", width: 1.5, points: { show: true } },
        { label: "queue delay (s)", stroke: "#d9822b", width: 1.5, points: { show: true } }
      ],
      axes: [{}, { label: "seconds" }]
    };
    new window.uPlot(options, [data.t, data.duration, data.delay], box);
  }

  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
