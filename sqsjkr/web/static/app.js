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
    var options = {
      width: Math.max(320, box.clientWidth || 800),
      height: 220,
      series: [
        {},
        { label: "duration (s)", stroke: "#2a6fdb", width: 1.5, points: { show: true } },
        { label: "queue delay (s)", stroke: "#d9822b", width: 1.5, points: { show: true } }
      ],
      // One run alone would stretch the time axis over years: an hour around it instead.
      scales: {
        x: { range: function (u, min, max) { return min === max ? [min - 1800, max + 1800] : [min, max]; } }
      },
      axes: [{}, { label: "seconds" }]
    };
    new window.uPlot(options, [data.t, data.duration, data.delay], box);
  }

  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
