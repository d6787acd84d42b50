// The console API (docs/console.md): URLs, the write header, streams, and a DOM helper.
// Everything shown comes from the server as data and is written with textContent only.

const base = new URL("../api/", import.meta.url);

export function apiUrl(path) {
  return new URL(path, base).toString();
}

async function answer(response) {
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(data.error || `the server answered HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

export async function getJson(path) {
  return answer(await fetch(apiUrl(path), { credentials: "same-origin" }));
}

// Writes carry X-Console-Request: the server refuses writes without it (cross-site requests).
export async function post(path, body) {
  return answer(await fetch(apiUrl(path), {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-Console-Request": "1", "Content-Type": "application/json" },
    body: JSON.stringify(body ?? {}),
  }));
}

export function stream(path, handlers) {
  const source = new EventSource(apiUrl(path));
  for (const [name, handle] of Object.entries(handlers)) {
    if (name === "open" || name === "error") {
      source.addEventListener(name, handle);
    } else {
      source.addEventListener(name, (event) => handle(JSON.parse(event.data)));
    }
  }
  return source;
}

// el("td", {class: "x", data: {taskId: id}}, "text", child): text children become text nodes.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "data") {
      Object.assign(node.dataset, value);
    } else if (key === "class") {
      node.className = value;
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

export function seconds(value) {
  if (value === undefined || value === null) return "";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(1)} s`;
  return `${Math.floor(value / 60)} min ${Math.round(value % 60)} s`;
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}
