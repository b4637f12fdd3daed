// matprobe's HTML report: draws each spec's chart with plotly from the JSON the
// page embeds (script#matprobe-data). Labels arrive entity-escaped: plotly reads
// a few HTML tags in text, and a name must be shown, never interpreted.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("matprobe-data").textContent);
  var colours = { best: "#2ca02c", baseline: "#e67e00", peer: "#7f7f7f", ours: "#1f77b4" };
  var PRODUCTION = "#9467bd";

  function draw(fig, d) {
    if (!d.labels.length) {
      fig.textContent = "no validated, timed variant to plot: see the table below for why";
      return;
    }
    var values = d.p10.concat(d.p90);
    if (d.baseline) values.push(d.baseline);
    if (d.production) values.push(d.production);
    var lo = Math.min.apply(null, values);
    var hi = Math.max.apply(null, values);
    var log = hi / lo > 8; // as the SVG plots: a log axis once values span > 8×
    var traces = [{
      type: "scatter", mode: "markers", x: d.median, y: d.labels, showlegend: false,
      marker: { size: 9, color: d.kind.map(function (k) { return colours[k] || colours.ours; }) },
      error_x: {
        type: "data", symmetric: false, thickness: 2, width: 0, color: "#555",
        array: d.median.map(function (m, i) { return d.p90[i] - m; }),
        arrayminus: d.median.map(function (m, i) { return m - d.p10[i]; })
      },
      hovertemplate: "%{y}<br>%{x:.3g} µs<extra></extra>"
    }];
    var layout = {
      height: 90 + 22 * d.labels.length,
      margin: { l: 10, r: 10, t: 34, b: 50 },
      yaxis: { autorange: "reversed", automargin: true },
      xaxis: {
        type: log ? "log" : "linear", dtick: log ? "D2" : undefined, domain: [0, d.pct ? 0.74 : 1],
        title: { text: "device µs per call (dot: median; whisker: p10–p90)" }
      },
      shapes: [], annotations: []
    };
    function reference(x, colour, text, row) {
      layout.shapes.push({
        type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
        line: { color: colour, dash: "dash", width: 1.5 }
      });
      layout.annotations.push({
        x: log ? Math.log10(x) : x, xref: "x", yref: "paper", y: 1, yanchor: "bottom",
        yshift: row * 13, text: text, showarrow: false, font: { color: colour, size: 11 }
      });
    }
    if (d.baseline) {
      reference(d.baseline, colours.baseline, "baseline " + d.baseline.toPrecision(3) + " µs", 0);
    }
    if (d.production) {
      reference(d.production, PRODUCTION,
        d.productionLabel + " " + d.production.toPrecision(3) + " µs", 1);
    }
    if (d.pct) {
      traces.push({
        type: "bar", orientation: "h", y: d.labels, xaxis: "x2", showlegend: false,
        x: d.pct.map(function (p) { return p === null ? 0 : Math.min(p, 100); }),
        marker: { color: d.pct.map(function (p) { return p > 100 ? "#d62728" : "#8fb8de"; }) },
        text: d.pct.map(function (p) {
          return p === null ? "" : (p > 100 ? ">100%!" : Math.round(p) + "%");
        }),
        textposition: "auto",
        hovertemplate: "%{y}<br>%{text} of the read ceiling<extra></extra>"
      });
      layout.xaxis2 = {
        domain: [0.78, 1], range: [0, 100], ticksuffix: "%", title: { text: "% of read ceiling" }
      };
    }
    Plotly.newPlot(fig, traces, layout, { displaylogo: false, responsive: true });
  }

  document.querySelectorAll("figure.plot[data-index]").forEach(function (fig) {
    draw(fig, data.specs[Number(fig.dataset.index)]);
  });
})();
