// One task's timeline: its log and the holders coming and going, streamed from the server.
import { clock, el, post, stream } from "./api.js";

export class Timeline {
  constructor(onError) {
    this.section = document.getElementById("timeline");
    this.list = document.getElementById("tl-items");
    this.title = document.getElementById("tl-task");
    this.stateLabel = document.getElementById("tl-state");
    this.cancelButton = document.getElementById("tl-cancel");
    this.onError = onError;
    this.source = null;
    this.taskId = null;
    document.getElementById("tl-close").addEventListener("click", () => this.close());
    this.cancelButton.addEventListener("click", () => this.cancel());
  }

  open(taskId, live) {
    this.close();
    this.taskId = taskId;
    this.title.textContent = taskId;
    this.stateLabel.textContent = "";
    this.cancelButton.hidden = !live;
    this.section.hidden = false;
    this.section.dataset.taskId = taskId;
    this.source = stream(`tasks/${encodeURIComponent(taskId)}/timeline`, {
      reset: () => this.list.replaceChildren(),
      item: (item) => this.add(item),
      end: (end) => {
        this.stateLabel.textContent = end.state;
        this.cancelButton.hidden = true;
        this.source?.close();  // ended: nothing more will come (and no reconnect)
      },
    });
  }

  setLive(live) {
    if (!live) this.cancelButton.hidden = true;
  }

  add(item) {
    const when = item.at ? clock(item.at) : item.time ? clock(Date.parse(item.time)) : "";
    const where = item.position !== undefined ? `#${item.position}` : "";
    let label = item.kind;
    if (item.kind === "status") label = `status ${item.state}`;
    if (item.kind === "artifact") label = `artifact ${item.name}`;
    const extra = [];
    if (item.reason) extra.push(`reason ${item.reason}`);
    if (item.canceledBy) extra.push(`canceled by ${item.canceledBy}`);
    if (item.holders) {
      extra.push(`holders now: ${Object.entries(item.holders).map(([k, v]) => `${k} ${v}`).join(", ")}`);
    }
    const row = el("li", { class: `item ${item.kind}`, data: { kind: item.kind } },
      el("span", { class: "when" }, when),
      el("span", { class: "pos" }, where),
      el("span", { class: "label" }, label),
      extra.length ? el("span", { class: "extra" }, extra.join(" · ")) : null,
      item.text ? el("pre", { class: "text" }, item.text) : null);
    // Follow the newest item, unless the reader scrolled up to look at older ones.
    const list = this.list;
    const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    list.append(row);
    if (atEnd) list.scrollTop = list.scrollHeight;
    if (item.kind === "status" && item.state) this.stateLabel.textContent = item.state;
  }

  async cancel() {
    if (!this.taskId) return;
    this.cancelButton.disabled = true;
    try {
      await post(`tasks/${encodeURIComponent(this.taskId)}/cancel`);
    } catch (err) {
      this.onError(err.message);
    } finally {
      this.cancelButton.disabled = false;
    }
  }

  close() {
    this.source?.close();
    this.source = null;
    this.taskId = null;
    this.section.hidden = true;
    this.list.replaceChildren();
  }
}
