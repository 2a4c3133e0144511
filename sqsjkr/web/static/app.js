// The dashboard's only script of its own: it draws an event's chart from the JSON in its
// data-chart attribute (no inline script: the Content Security Policy allows 'self' only),
// again after each refresh of the page's live part, and keeps each live output box scrolled
// to its newest line unless its reader scrolled up. Pages work without it.
(function () {
  "use strict";

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // The axis's times as the dashboard writes every other time: ISO 8601 in its zone (the
  // offset the server sent), not the browser's 12-hour clock.
  function clock(data, span) {
    return function (t) {
      var d = new Date((t + data.offset) * 1000);
      var time = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
      if (span < 1200) time += ":" + pad(d.getUTCSeconds());
      if (span < 86400) return time;
      return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + time;
    };
  }

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
        { label: "ended", value: function (u, t) { return t == null ? "--" : clock(data, 86400)(t); } },
        { label: "duration (s)", stroke: "#2a6fdb", width: 1.5, points: { show: true } },
        { label: "queue delay (s)", stroke: "#d9822b", width: 1.5, points: { show: true } }
      ],
      axes: [
        // Wide apart, so that no two labels touch.
        { space: 120, values: function (u, splits) { return splits.map(clock(data, hi - lo)); } },
        { label: "seconds" }
      ]
    };
    new window.uPlot(options, [data.t, data.duration, data.delay], box);
  }

  // Each live output box's scroll before a refresh, by its run's message id: a refresh
  // replaces the box, and a new box starts at its top.
  var tails = {};

  function keepTails() {
    tails = {};
    document.querySelectorAll("pre[data-tail]").forEach(function (box) {
      var atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
      tails[box.dataset.tail] = atEnd ? null : box.scrollTop;
    });
  }

  function scrollTails() {
    document.querySelectorAll("pre[data-tail]").forEach(function (box) {
      var kept = tails[box.dataset.tail];
      // The newest lines are what a reader looks for, unless they scrolled up to read more.
      box.scrollTop = kept === undefined || kept === null ? box.scrollHeight : kept;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    draw(document);
    scrollTails();
  });
  document.addEventListener("htmx:beforeSwap", keepTails);
  document.addEventListener("htmx:afterSwap", scrollTails);
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
