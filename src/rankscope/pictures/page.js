// Draws the page model embedded as JSON (rankscope.pictures.page): every string goes in as text.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("rankscope-data").textContent);
  const root = document.getElementById("page");

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function header() {
    root.appendChild(el("h1", "", data.title));
    root.appendChild(el("p", "sub", data.subtitle));
    const box = el("section", "verdict");
    box.id = "verdict";
    data.verdict.forEach(function (line, index) { box.appendChild(el("p", index === 0 ? "lead" : "", line)); });
    root.appendChild(box);
    (data.notes || []).forEach(function (line) { root.appendChild(el("p", "note", "note: " + line)); });
  }

  const ROW = 19;
  const PALETTE = ["#4c6ef5", "#f08c00", "#2f9e44", "#ae3ec9", "#1098ad", "#e8590c", "#5c940d", "#c2255c",
    "#364fc7", "#a61e4d", "#087f5b", "#862e9c"];

  function flame(section, box) {
    const detail = el("div", "detail", "Click a frame: its ranks and its source line.");
    detail.id = "frame-detail";
    const nodes = [];
    section.roots.forEach(function (top) {
      const area = el("div", "icicle");
      let depth = 0;
      const total = Math.max(1, section.total, top.count);  // a role on fewer ranks is narrower
      function place(node, level, left, width) {
        depth = Math.max(depth, level + 1);
        const div = el("div", "fn" + (level === 0 ? " root" : "") + (node.library ? " lib" : "") +
          (node.culprit ? " cul" : ""), node.name);
        div.style.left = (left * 100) + "%";
        div.style.width = (width * 100) + "%";
        div.style.top = (level * ROW) + "px";
        div.title = node.name + (node.where ? " (" + node.where + ")" : "") + " — " + node.ranks;
        div.dataset.node = String(nodes.length);
        nodes.push(node);
        area.appendChild(div);
        let offset = left;
        node.children.forEach(function (child) {
          const share = width * child.count / Math.max(1, node.count);
          place(child, level + 1, offset, share);
          offset += share;
        });
      }
      place(top, 0, 0, top.count / total);
      area.style.height = (depth * ROW + 2) + "px";
      area.addEventListener("click", function (event) {
        const target = event.target.closest(".fn");
        if (!target) return;
        area.parentNode.querySelectorAll(".fn.sel").forEach(function (n) { n.classList.remove("sel"); });
        target.classList.add("sel");
        const node = nodes[Number(target.dataset.node)];
        const lines = [node.name];
        if (node.where) lines.push("at " + (node.path ? node.path + (node.where.indexOf(":") >= 0 ?
          ":" + node.where.split(":").pop() : "") : node.where));
        lines.push(node.count + (node.count === 1 ? " rank: " : " ranks: ") + node.ranks);
        if (node.culprit) lines.push("includes ranks " + (section.named_by || "the diagnosis") + " names");
        if (node.folded.length) lines.push("folded frames:\n  " + node.folded.join("\n  "));
        detail.textContent = lines.join("\n");
      });
      box.appendChild(area);
    });
    box.appendChild(detail);
  }

  function grid(section, box) {
    const table = el("table", "grid");
    section.rows.forEach(function (row) {
      const tr = el("tr");
      tr.appendChild(el("th", "", row.node));
      row.cells.forEach(function (cell) {
        const td = el("td", "cell" + (cell.culprit ? " cul" : ""), cell.rank);
        td.style.background = cell.group < 0 ? "#fff" : PALETTE[cell.group % PALETTE.length];
        td.title = "rank " + cell.rank + ": " + (cell.group < 0 ? "no stack" : section.groups[cell.group]);
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    box.appendChild(table);
    section.groups.forEach(function (label, index) {
      const line = el("p", "note");
      const swatch = el("span", "swatch");
      swatch.style.background = PALETTE[index % PALETTE.length];
      line.appendChild(swatch);
      line.appendChild(document.createTextNode(label));
      box.appendChild(line);
    });
  }

  function fr(section, box) {
    if (section.note) box.appendChild(el("p", "note", section.note));
    section.groups.forEach(function (group) {
      box.appendChild(el("h3", "", group.name + ", ranks " + group.members));
      if (group.divergence) box.appendChild(el("p", "note", "first divergence: " + group.divergence));
      group.lanes.forEach(function (lane) {
        const row = el("div", "lane");
        row.appendChild(el("span", "who", lane.ranks));
        const ops = el("div", "ops");
        if (lane.left_out_before) ops.appendChild(el("span", "gap", "… " + lane.left_out_before + " earlier"));
        lane.collectives.forEach(function (op) {
          const item = el("span", "op " + (op.diverges ? "div" : op.state), "#" + op.seq + " " + op.op);
          item.title = "#" + op.seq + " " + op.op + (op.state ? ", " + op.state : "") + (op.where ? " from " + op.where : "");
          ops.appendChild(item);
        });
        if (lane.left_out_after) ops.appendChild(el("span", "gap", lane.left_out_after + " later …"));
        if (lane.summary) ops.appendChild(el("span", "gap", lane.summary));
        row.appendChild(ops);
        box.appendChild(row);
      });
    });
  }

  function heatmap(section, box) {
    const table = el("table", "heat");
    const head = el("tr");
    head.appendChild(el("th", "", "from \\ to"));
    section.columns.forEach(function (name) { head.appendChild(el("th", "", name)); });
    table.appendChild(head);
    section.rows.forEach(function (name, i) {
      const tr = el("tr");
      tr.appendChild(el("th", "", name));
      section.cells[i].forEach(function (word, j) {
        const kind = word === "" ? "none" : word === section.good ? "good" : "bad";
        const td = el("td", "v " + kind, word || "-");
        td.title = name + " -> " + section.columns[j] + ": " + (section.legend[word] || word);
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    box.appendChild(table);
    Object.keys(section.legend).forEach(function (word) {
      box.appendChild(el("p", "note", (word || "-") + ": " + section.legend[word]));
    });
  }

  function facts(section, box) {
    const table = el("table", "facts");
    const head = el("tr");
    section.header.forEach(function (name) { head.appendChild(el("th", "", name)); });
    table.appendChild(head);
    section.rows.forEach(function (row) {
      const tr = el("tr");
      row.forEach(function (value) { tr.appendChild(el("td", "", value)); });
      table.appendChild(tr);
    });
    box.appendChild(table);
  }

  const LANE = 16;

  function ms(us) { return (us / 1000).toFixed(us < 10000 ? 3 : 1) + " ms"; }

  function timeline(section, box) {
    section.notes.forEach(function (line) { box.appendChild(el("p", "note", line)); });
    const span = Math.max(1, section.end - section.start);
    const at = function (us) { return ((us - section.start) / span * 100) + "%"; };
    const axis = el("div", "tl-row tl-axis");
    axis.appendChild(el("span", "who", ""));
    const scale = el("div", "tl-area");
    for (let i = 0; i <= 4; i++) {
      const mark = el("span", "tl-mark", ms(span * i / 4));
      mark.style.left = (i * 25) + "%";
      mark.style.transform = "translateX(-" + (i * 25) + "%)";  // the first and last stay inside
      scale.appendChild(mark);
    }
    axis.appendChild(scale);
    box.appendChild(axis);
    const detail = el("div", "detail", "Click a bar: the call, where it is, how long it ran.");
    detail.id = "slice-detail";
    section.rows.forEach(function (row) {
      const line = el("div", "tl-row");
      line.dataset.rank = row.label;
      const who = el("span", "who", row.label);
      who.title = row.label + (row.clock ? " — " + row.clock : "") + "\n" +
        row.threads.map(function (t) { return "lane " + t[0] + ": " + t[1]; }).join("\n");
      if (row.clock) who.appendChild(el("span", "tl-clock", row.clock));
      line.appendChild(who);
      const area = el("div", "tl-area");
      area.style.height = (Math.max(1, row.lanes) * LANE + 8) + "px";
      row.slices.forEach(function (call) {
        const bar = el("div", "sl" + (call.open ? " open" : "") + (call.before ? " before" : ""),
          call.name + (call.open ? " ⟶" : ""));
        bar.style.left = at(call.start);
        bar.style.width = ((call.end - call.start) / span * 100) + "%";
        bar.style.top = (call.lane * LANE) + "px";
        const lines = [call.name + " at " + call.where, ms(call.end - call.start) + (call.open ?
          ", still open at the end of the ring" : "") + (call.before ? ", open before the ring's oldest record" : "")];
        bar.title = lines.join("\n");
        bar.addEventListener("click", function () { detail.textContent = row.label + ": " + lines.join("\n"); });
        area.appendChild(bar);
      });
      row.steps.forEach(function (step) {
        const tick = el("div", "tick");
        tick.style.left = at(step.at);
        tick.title = "step " + step.step + " at " + ms(step.at - section.start);
        area.appendChild(tick);
      });
      const end = el("div", "tl-end");
      end.style.left = at(row.end);
      end.title = "end of the ring";
      area.appendChild(end);
      line.appendChild(area);
      box.appendChild(line);
    });
    box.appendChild(detail);
  }

  const DRAW = { flame: flame, grid: grid, fr: fr, heatmap: heatmap, table: facts, timeline: timeline };

  header();
  data.sections.forEach(function (section) {
    const box = el("section", "picture " + section.kind);
    box.appendChild(el("h2", "", section.title));
    const draw = DRAW[section.kind];
    if (draw) draw(section, box);
    root.appendChild(box);
  });
  document.body.dataset.drawn = "yes";
})();
