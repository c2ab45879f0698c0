/**
 * How numbers, times and small loss curves are written on the page. A missing value is
 * always an en dash, never "NaN" or "undefined".
 */

const DASH = "–";
const SVG_NS = "http://www.w3.org/2000/svg";

const isNumber = (v) => typeof v === "number" && Number.isFinite(v);

export function fmtNumber(value, digits = 4) {
  if (!isNumber(value)) return DASH;
  if (value !== 0 && (Math.abs(value) < 1e-3 || Math.abs(value) >= 1e5)) {
    return value.toExponential(Math.max(0, digits - 2)).replace(/\.?0+e/, "e");
  }
  return String(Number(value.toPrecision(digits)));
}

/** An axis tick: as many digits as the spacing between ticks needs, and no more. */
export function fmtTick(value, increment) {
  if (!isNumber(value) || value === 0) return isNumber(value) ? "0" : DASH;
  const step = Math.abs(increment) || Math.abs(value);
  if (Math.abs(value) < 1e-3 || Math.abs(value) >= 1e5) {
    const significant = Math.max(1, Math.floor(Math.log10(Math.abs(value))) - Math.floor(Math.log10(step)) + 1);
    return value.toExponential(Math.min(significant - 1, 6)).replace(/\.?0+e/, "e");
  }
  return value.toFixed(Math.min(Math.max(0, Math.ceil(-Math.log10(step))), 8));
}

export function fmtInt(value) {
  return isNumber(value) ? Math.round(value).toLocaleString("en-US") : DASH;
}

/** Seconds as "42s", "3m 05s" or "2h 07m". */
export function fmtDuration(seconds) {
  if (!isNumber(seconds) || seconds < 0) return DASH;
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

/** A server timestamp (ISO text or epoch seconds) as local date and time. */
export function fmtTime(value) {
  if (value === null || value === undefined || value === "") return DASH;
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  const sameYear = date.getFullYear() === new Date().getFullYear();
  return date.toLocaleString(undefined, {
    year: sameYear ? undefined : "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
}

/** A size in bytes as "512 B", "3.2 KB", "1.5 GB" (powers of 1024). */
export function formatBytes(bytes) {
  if (!isNumber(bytes) || bytes < 0) return DASH;
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

export function fmtMemory(gb) {
  return isNumber(gb) ? `${fmtNumber(gb, 3)} GB` : DASH;
}

/** An inline SVG line of a loss sparkline (numbers; nulls are skipped), or a dash. */
export function sparkline(values, { width = 120, height = 28, label = "loss sparkline" } = {}) {
  const points = (values || []).map((v, i) => [i, v]).filter(([, v]) => isNumber(v));
  if (points.length < 2) {
    const empty = document.createElement("span");
    empty.className = "sparkline-empty";
    empty.textContent = DASH;
    return empty;
  }
  const ys = points.map(([, v]) => v);
  const lo = Math.min(...ys);
  const span = Math.max(...ys) - lo || 1;
  const last = points[points.length - 1][0] || 1;
  const pad = 2;
  const coords = points.map(([i, v]) => {
    const x = pad + (i / last) * (width - 2 * pad);
    const y = pad + (1 - (v - lo) / span) * (height - 2 * pad);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("class", "sparkline");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}: from ${fmtNumber(ys[0])} to ${fmtNumber(ys[ys.length - 1])}`);
  const line = document.createElementNS(SVG_NS, "polyline");
  line.setAttribute("points", coords.join(" "));
  svg.append(line);
  return svg;
}
