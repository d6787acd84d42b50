// Ends per reason per minute: stacked bars drawn as SVG elements (no inline style: CSP).

const SVG = "http://www.w3.org/2000/svg";
const KNOWN = ["completed", "hang-up", "CancelTask", "shutdown", "deadline", "input-timeout",
  "error", "failed", "rejected", "parked-limit"];

export function reasonClass(reason) {
  return KNOWN.includes(reason) ? `r-${reason}` : "r-other";
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// minutes: [{start: ms, reasons: {reason: count}}], oldest first (the API's "counts").
export function drawChart(chart, legend, minutes) {
  const width = 450, height = 120, top = 8, bottom = 18, left = 28;
  const plot = height - top - bottom;
  const slot = (width - left) / Math.max(minutes.length, 1);
  const totals = minutes.map((m) => Object.values(m.reasons).reduce((a, b) => a + b, 0));
  const peak = Math.max(1, ...totals);
  const sums = new Map();
  chart.replaceChildren();
  chart.append(svg("line", { x1: left, y1: top + plot, x2: width, y2: top + plot, class: "axis" }));
  chart.append(svg("text", { x: left - 4, y: top + 8, class: "tick end" }, String(peak)));
  chart.append(svg("text", { x: left - 4, y: top + plot, class: "tick end" }, "0"));
  minutes.forEach((minute, i) => {
    let y = top + plot;
    const reasons = Object.entries(minute.reasons).sort((a, b) => a[0].localeCompare(b[0]));
    for (const [reason, count] of reasons) {
      sums.set(reason, (sums.get(reason) ?? 0) + count);
      const h = (count / peak) * plot;
      y -= h;
      const bar = svg("rect", { x: left + i * slot + 2, y, width: Math.max(slot - 4, 1),
        height: Math.max(h, 0.5), class: `bar ${reasonClass(reason)}` });
      bar.append(svg("title", {}, `${reason}: ${count}`));
      chart.append(bar);
    }
    if (i % 5 === 4 || i === minutes.length - 1) {
      const label = new Date(minute.start).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
      chart.append(svg("text", { x: left + i * slot + slot / 2, y: height - 4, class: "tick mid" }, label));
    }
  });
  legend.replaceChildren();
  if (sums.size === 0) {
    const none = document.createElement("li");
    none.textContent = "no run ended in this window";
    legend.append(none);
  }
  for (const [reason, count] of [...sums.entries()].sort((a, b) => b[1] - a[1])) {
    const item = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = `swatch ${reasonClass(reason)}`;
    item.append(swatch, document.createTextNode(`${reason}: ${count}`));
    item.dataset.reason = reason;
    legend.append(item);
  }
}
