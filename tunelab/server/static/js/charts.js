/**
 * Line charts on top of the vendored uPlot (loaded as the global `uPlot`).
 *
 * A LineChart owns one container: it sizes itself to the container's width, takes its
 * colours from the theme's CSS variables (and redraws when the theme changes), and
 * records how many points it shows and its last step in `data-points` and
 * `data-last-step` (and each series' own count in `data-series-points`), which the
 * browser tests compare with the server's metrics.
 * Markers (`setMarkers`) are dashed vertical lines at given steps, each labelled (where a
 * resumed run took over); their labels are also in `data-markers`.
 */

import { fmtNumber, fmtTick } from "./format.js";

const HEIGHT = 200;

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** The nth series colour of the theme (the palette repeats for many runs). */
function seriesColor(n) {
  return cssVar(`--chart-${(n % 8) + 1}`);
}

export class LineChart {
  /**
   * @param container element the chart fills
   * @param options {title, xLabel, xLog (a logarithmic x axis), xFormat (x tick label, "" for none), series: [{label, colorIndex, style: "points"|"line"|"both", width}]}
   */
  constructor(container, options) {
    this.container = container;
    this.options = options;
    this.data = [[], ...options.series.map(() => [])];
    this.plot = null;
    this.markers = [];
    this.#build();
    new ResizeObserver(() => this.#fit()).observe(container);
    document.addEventListener("themechange", () => this.#build());
  }

  /** Replace the series definitions (compare view: one per run) together with their data. */
  setSeries(series, data) {
    this.options = { ...this.options, series };
    this.data = data;
    this.#build();
  }

  /** Replace the markers: [{step, label}]. */
  setMarkers(markers) {
    const key = JSON.stringify(markers || []);
    if (key === JSON.stringify(this.markers)) return; // set on every redraw of the data; draw again only on a change
    this.markers = markers || [];
    this.container.dataset.markers = this.markers.map((m) => m.label).join("; ");
    // setData draws everything again, axes included (a bare redraw right after a rebuild
    // would draw axes whose ticks are not computed yet).
    if (this.plot) this.plot.setData(this.data);
  }

  setData(data) {
    this.data = data;
    if (this.plot) this.plot.setData(data);
    this.#count();
  }

  #build() {
    if (this.plot) this.plot.destroy();
    const axis = cssVar("--chart-axis");
    const grid = cssVar("--chart-grid");
    const axisStyle = { stroke: axis, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const series = this.options.series.map((s) => {
      const color = seriesColor(s.colorIndex ?? 0);
      const showPoints = s.style === "points" || s.style === "both";
      return {
        label: s.label,
        stroke: color,
        width: s.style === "points" ? 0 : s.width ?? 2,
        points: { show: showPoints, size: 5, fill: color, stroke: color },
        spanGaps: true,
        value: (u, v) => fmtNumber(v),
      };
    });
    this.plot = new uPlot({
      width: this.#width(),
      height: HEIGHT,
      title: this.options.title,
      scales: { x: this.options.xLog ? { time: false, distr: 3 } : { time: false } },
      axes: [
        { ...axisStyle, label: this.options.xLabel || "step",
          ...(this.options.xFormat ? { values: (u, values) => values.map((v) => (v == null ? "" : this.options.xFormat(v))) } : {}) },
        { ...axisStyle, size: 64, values: (u, values, axis, space, increment) => values.map((v) => fmtTick(v, increment)) },
      ],
      series: [{ label: this.options.xLabel || "step" }, ...series],
      legend: { live: true },
      hooks: { draw: [(u) => this.#drawMarkers(u)] },
    }, this.data, this.container);
    this.#count();
  }

  /** Each marker as a dashed line across the plot, its label at the top (left of the
   * line where it would run past the right edge). */
  #drawMarkers(u) {
    if (!this.markers.length) return;
    const ratio = uPlot.pxRatio || 1;
    const { left, top, width, height } = u.bbox;
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = ctx.fillStyle = cssVar("--chart-axis");
    ctx.lineWidth = ratio;
    ctx.setLineDash([4 * ratio, 3 * ratio]);
    ctx.font = `${11 * ratio}px sans-serif`;
    ctx.textBaseline = "top";
    for (const marker of this.markers) {
      const x = Math.round(u.valToPos(marker.step, "x", true));
      if (!Number.isFinite(x) || x < left || x > left + width) continue;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      const room = left + width - x;
      const textWidth = ctx.measureText(marker.label).width;
      ctx.textAlign = textWidth + 8 * ratio > room ? "right" : "left";
      ctx.fillText(marker.label, x + (ctx.textAlign === "right" ? -4 : 4) * ratio, top + 4 * ratio);
    }
    ctx.restore();
  }

  #width() {
    return Math.max(240, this.container.clientWidth || 240);
  }

  #fit() {
    if (this.plot && Math.abs(this.plot.width - this.#width()) > 1) this.plot.setSize({ width: this.#width(), height: HEIGHT });
  }

  #count() {
    const xs = this.data[0];
    this.container.dataset.points = String(xs.length);
    this.container.dataset.lastStep = xs.length ? String(xs[xs.length - 1]) : "";
    // Each series' own points (a compared run's, or the part before a resume).
    this.container.dataset.seriesPoints = this.data.slice(1).map((ys) => ys.filter((y) => y !== null && y !== undefined).length).join(",");
    this.container.classList.toggle("is-empty", xs.length === 0);
  }
}
