// The maintenance page: the master's plan as a timeline, its operations and its events.
//
// Plain JavaScript, no library, no request to anything but the origin that served the
// page (the master, or `nodeagent master ui` in front of it). Every name and fact from the
// master is inserted as text (textContent, SVG <title> text), never as markup.
//
// It reads GET /v1/maintenance/plan and GET /v1/maintenance/operations every few seconds,
// follows GET /v1/events (Server-Sent Events) and, on each event, appends it to the list
// and reads the plan again (at most once a second; the operations too on an operation's
// event). Times are the master's clock (the plan's `now`), shown in local time or UTC.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const PLAN_PATH = "/v1/maintenance/plan?blockers=false&limit=2000";
  const OPERATIONS_PATH = "/v1/maintenance/operations";
  const EVENTS_PATH = "/v1/events";
  const EVENTS_RETRY_MS = 5000; // after the stream was refused (the master away, say)
  const POLL_MS = 5000; // the plan and the operations, events or not
  const MIN_GAP_MS = 1000; // at most one plan read a second
  const EVENTS_KEPT = 50;
  const EVENT_TYPES = [
    "schedule.changed", "mode.changed",
    "drain.recorded", "drain.committed", "drain.escalated", "drain.cancelled", "drain.down",
    "drain.started", "drain.completed", "drain.ended",
    "node.lost", "node.back", "node.shutting_down", "node.rebooted", "node.shutdown_cancelled",
    "hook.started", "hook.succeeded", "hook.failed",
    "health.passing", "health.failing",
    "operation.started", "operation.batch_held", "operation.batch_started",
    "operation.batch_done", "operation.batch_skipped", "operation.paused",
    "operation.resumed", "operation.ended",
    "notice.issued", "notice.rescinded", "notice.answered",
    "leader.elected", "gap",
  ];

  const state = {
    plan: null,
    operations: null,
    offset: 0, // the master's clock minus the browser's, in seconds
    utc: false,
    planTimer: null,
    planBusy: false,
    planAgain: false,
    planLast: 0,
    events: null,
    eventsSeen: new Set(),
    lastEventId: null, // the newest event shown: where a new stream starts again
  };

  const $ = (id) => document.getElementById(id);

  // --- text and times -------------------------------------------------------------------

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function titled(node, text) {
    node.appendChild(svg("title", {}, text));
    return node;
  }

  function masterNow() {
    return Date.now() / 1000 + state.offset;
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  function parts(seconds) {
    const d = new Date(seconds * 1000);
    if (state.utc) {
      return [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(),
        d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()];
    }
    return [d.getFullYear(), d.getMonth() + 1, d.getDate(),
      d.getHours(), d.getMinutes(), d.getSeconds()];
  }

  function clock(seconds) {
    const [, , , h, m, s] = parts(seconds);
    return `${pad(h)}:${pad(m)}:${pad(s)}`;
  }

  function stamp(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    const [y, mo, d, h, m, s] = parts(seconds);
    return `${y}-${pad(mo)}-${pad(d)} ${pad(h)}:${pad(m)}:${pad(s)}${state.utc ? "Z" : ""}`;
  }

  function span(seconds) {
    const s = Math.abs(Math.round(seconds));
    if (s < 90) return `${s} s`;
    if (s < 5400) return `${Math.round(s / 60)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  function relative(seconds) {
    if (seconds === null || seconds === undefined) return "";
    const delta = seconds - masterNow();
    if (Math.abs(delta) < 1) return "now";
    return delta > 0 ? `in ${span(delta)}` : `${span(delta)} ago`;
  }

  function when(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    return `${stamp(seconds)} (${relative(seconds)})`;
  }

  function number(n) {
    return typeof n === "number" ? n.toLocaleString("en") : "—";
  }

  function hostname(row) {
    const id = row.machine_id || {};
    return id.hostname || id.ip || "?";
  }

  // --- talking to the master ------------------------------------------------------------

  function problem(text) {
    const box = $("problem");
    box.textContent = text || "";
    box.hidden = !text;
  }

  async function getJSON(path) {
    const reply = await fetch(path, {
      headers: { Accept: "application/json" },
      cache: "no-store",
      credentials: "same-origin",
      redirect: "error",
    });
    let body = null;
    try {
      body = await reply.json();
    } catch (err) {
      body = null;
    }
    if (!reply.ok) {
      const error = body && body.error ? body.error : null;
      const what = error ? `${error.code}: ${error.message}` : `HTTP ${reply.status}`;
      throw new Error(`${path.split("?")[0]}: ${what}`);
    }
    if (body === null) {
      // a reply begun and cut short: the master went away while it answered
      throw new Error(`${path.split("?")[0]}: the reply ended early (the master went away?)`);
    }
    return body;
  }

  async function readPlan() {
    state.planBusy = true;
    state.planLast = Date.now();
    try {
      const plan = await getJSON(PLAN_PATH);
      state.offset = plan.now - Date.now() / 1000;
      state.plan = plan;
      drawPlan();
      $("updated").textContent = `plan at ${clock(plan.now)}`;
      problem("");
    } catch (err) {
      problem(String(err.message || err));
    } finally {
      state.planBusy = false;
      if (state.planAgain) {
        state.planAgain = false;
        planSoon();
      }
    }
  }

  // A plan read soon: at once if the last began a second ago or more, else a second after
  // it; never two at a time.
  function planSoon() {
    if (state.planBusy) {
      state.planAgain = true;
      return;
    }
    if (state.planTimer !== null) return;
    const wait = Math.max(0, state.planLast + MIN_GAP_MS - Date.now());
    state.planTimer = setTimeout(() => {
      state.planTimer = null;
      readPlan();
    }, wait);
  }

  async function readOperations() {
    try {
      const body = await getJSON(OPERATIONS_PATH);
      state.operations = body.operations || [];
      drawOperations();
    } catch (err) {
      problem(String(err.message || err));
    }
  }

  async function readLeader() {
    try {
      const body = await getJSON("/v1/leader");
      const who = body.leader ? `leader ${body.leader}` : "no leader";
      $("leader").textContent = `${body.store} · ${who}`;
    } catch (err) {
      $("leader").textContent = "";
    }
  }

  // --- the totals -----------------------------------------------------------------------

  const TOTALS = [
    ["machines", "machines"],
    ["behind", "not read yet (counted as of an older ad)", null, true],
    ["UP", "up", (t) => t.modes && t.modes.UP],
    ["DRAINING", "draining", (t) => t.modes && t.modes.DRAINING],
    ["DOWN", "down", (t) => t.modes && t.modes.DOWN],
    ["on_time", "on time"],
    ["late", "late by their promises", null, true],
    ["escalations", "to be escalated", null, true],
    ["escalations_next_hour", "escalations within the hour", null, true],
    ["cut_jobs", "jobs cut", null, true],
    ["cut_core_seconds", "core-s of promises cut", null, true],
    ["escalation_badput", "escalation badput (core-s)", null, true],
    ["lost", "lost nodes", null, true],
    ["without_node", "without a node", null, true],
    ["empty", "empty"],
    ["out_of_service", "out of service"],
    ["hooks_failed", "hooks failed", null, true],
    ["health_failing", "health failing", null, true],
    ["drains_started", "drains started"],
    ["closed", "closed before the windows (core-h)", (t) => t.closed_core_hours && t.closed_core_hours.planned],
    ["declined", "notices declined", (t) => t.notices && t.notices.declined, true],
    ["unanswered", "notices unanswered", (t) => t.notices && t.notices.unanswered],
  ];

  function drawTotals(totals) {
    const list = $("totals");
    list.replaceChildren();
    for (const [key, label, read, alarming] of TOTALS) {
      const value = read ? read(totals) : totals[key];
      const item = el("div", { "data-total": key });
      if (alarming && value > 0) item.classList.add("alert");
      item.append(el("dt", {}, label), el("dd", {}, number(value)));
      list.appendChild(item);
    }
  }

  // --- the timeline ---------------------------------------------------------------------

  const ROW_H = 34;
  const AXIS_H = 34;
  const LABEL_W = 230;
  const RIGHT = 16;
  const STEPS = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800, 1209600, 2592000];

  function rowTimes(row) {
    const out = [];
    const w = row.window || {};
    for (const t of [w.start, w.end, row.planned_drain_start]) if (typeof t === "number") out.push(t);
    if (row.promises) out.push(row.promises.completion);
    if (row.as_planned) {
      out.push(row.as_planned.completion);
      for (const cut of row.as_planned.cuts || []) out.push(cut.promise_end);
    }
    return out.filter((t) => typeof t === "number" && isFinite(t));
  }

  function range(rows, now) {
    let t0 = now - 600;
    let t1 = now + 3600;
    for (const row of rows) {
      for (const t of rowTimes(row)) {
        t0 = Math.min(t0, t);
        t1 = Math.max(t1, t);
      }
      const w = row.window || {};
      if (typeof w.start === "number" && w.end === null) t1 = Math.max(t1, w.start + 3600);
    }
    // A very old start or a far window would squeeze the rest: keep a month around now.
    t0 = Math.max(t0, now - 7 * 86400);
    t1 = Math.min(t1, now + 30 * 86400);
    const margin = (t1 - t0) * 0.03;
    return [t0 - margin, t1 + margin];
  }

  function tickStep(t0, t1) {
    for (const step of STEPS) if ((t1 - t0) / step <= 8) return step;
    return STEPS[STEPS.length - 1];
  }

  function tickLabel(t, step) {
    const [, mo, d, h, m] = parts(t);
    if (step >= 86400) return `${mo}-${pad(d)}`;
    if (h === 0 && m === 0) return `${mo}-${pad(d)} 00:00`;
    return `${pad(h)}:${pad(m)}`;
  }

  function drawTimeline(plan) {
    const box = $("timeline-box");
    const chart = $("timeline");
    const rows = plan.machines || [];
    const now = plan.now;
    const width = Math.max(box.clientWidth || 900, 640);
    const height = AXIS_H + rows.length * ROW_H + 4;
    chart.replaceChildren();
    chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    chart.setAttribute("width", width);
    chart.setAttribute("height", height);
    chart.dataset.rows = String(rows.length);
    $("no-machines").hidden = rows.length > 0;
    if (!rows.length) return;

    const [t0, t1] = range(rows, now);
    const x = (t) => LABEL_W + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * (width - LABEL_W - RIGHT);
    const inside = (t) => typeof t === "number" && t >= t0 && t <= t1;

    // The axis: a tick line and a label per step, in the zone shown (local time or UTC).
    const axis = svg("g", { class: "axis" });
    const step = tickStep(t0, t1);
    const zone = state.utc ? 0 : new Date(now * 1000).getTimezoneOffset() * 60;
    for (let t = Math.ceil((t0 - zone) / step) * step + zone; t <= t1; t += step) {
      axis.appendChild(svg("line", { x1: x(t), x2: x(t), y1: AXIS_H - 6, y2: height }));
      axis.appendChild(svg("text", { x: x(t) + 3, y: AXIS_H - 10 }, tickLabel(t, step)));
    }
    chart.appendChild(axis);

    rows.forEach((row, i) => {
      const y = AXIS_H + i * ROW_H;
      const mid = y + ROW_H / 2;
      const name = hostname(row);
      const drain = row.drain || {};
      const lost = (row.nodes || []).some((n) => n.lost);
      const rebooting = (row.nodes || []).some((n) => n.rebooting);
      const going = !rebooting && Boolean(drain.shutting_down);
      const planned = row.as_planned || {};
      const g = svg("g", {
        class: "row",
        "data-machine": name,
        "data-mode": row.mode,
        "data-drain": drain.state || "none",
        "data-escalates": planned.will_escalate ? "true" : "false",
        "data-lost": lost ? "true" : "false",
        "data-stale": row.figures_stale ? "true" : "false",
        "data-node": rebooting ? "rebooting" : going ? "shutting_down" : "up",
      });
      if (lost) g.classList.add("lost");
      if (row.figures_stale) g.classList.add("stale");
      if (i % 2 === 0) g.appendChild(svg("rect", { class: "band", x: 0, y, width, height: ROW_H }));

      g.appendChild(svg("text", { class: "name", x: 6, y: y + 14 }, name));
      const sub = [row.mode];
      if (drain.state && drain.state !== "none") sub.push(`${drain.schedule || ""} ${drain.state}`.trim());
      if (!row.node) sub.push("no node");
      const subText = svg("text", { class: "sub", x: 6, y: y + 28 }, sub.join(" · "));
      g.appendChild(subText);
      if (lost) g.appendChild(titled(svg("text", { class: "mark-lost", x: LABEL_W - 58, y: y + 14 }, "LOST"), `${name}: its node is lost (no ad within the ad lifetime)`));
      if (row.figures_stale) g.appendChild(titled(svg("text", { class: "mark-stale", x: LABEL_W - 58, y: y + 28 }, "STALE"), `${name}: its figures predate its window (the node did not answer a fresh fetch)`));
      if (rebooting) g.appendChild(titled(svg("text", { class: "mark-shutdown", x: LABEL_W - 8, y: y + 14 }, "REBOOTING"), `${name}: its machine shut down; not counted lost until its reboot grace runs out`));
      else if (going) g.appendChild(titled(svg("text", { class: "mark-shutdown", x: LABEL_W - 8, y: y + 14 }, "SHUTTING DOWN"), `${name}: its machine is shutting down; its node drains its jobs first`));

      const w = row.window || {};
      if (typeof w.start === "number") {
        const end = typeof w.end === "number" ? w.end : t1;
        g.appendChild(titled(svg("rect", {
          class: "window", x: x(w.start), y: y + 4, width: Math.max(x(end) - x(w.start), 2), height: ROW_H - 8,
        }), `${name}: window ${stamp(w.start)} → ${typeof w.end === "number" ? stamp(w.end) : "open-ended"}`));
      }
      const start = row.planned_drain_start;
      const empty = planned.completion;
      if (typeof empty === "number") {
        const from = drain.state === "draining" || typeof start !== "number" ? Math.min(now, empty) : start;
        const bar = svg("rect", {
          class: drain.state === "draining" ? "drain active" : "drain",
          x: x(from), y: mid - 4, width: Math.max(x(empty) - x(from), 1), height: 8,
        });
        g.appendChild(titled(bar, `${name}: drain ${drain.state || "planned"}, empty as planned ${when(empty)}`));
      }
      if (inside(start)) {
        g.appendChild(titled(svg("line", { class: "drain-start", x1: x(start), x2: x(start), y1: y + 5, y2: y + ROW_H - 5 }),
          `${name}: planned drain start ${when(start)}`));
      }
      if (planned.will_escalate) {
        const at = typeof w.start === "number" ? w.start : now;
        g.appendChild(titled(svg("line", { class: "escalation", x1: x(at), x2: x(at), y1: y + 2, y2: y + ROW_H - 2 }),
          `${name}: escalated (${planned.escalation}) at ${stamp(at)}: ${planned.cut_jobs} job(s) cut`));
        for (const cut of planned.cuts || []) {
          const rect = svg("rect", {
            class: "cut", "data-job": cut.job_id,
            x: x(cut.evict_at), y: mid + 5, width: Math.max(x(cut.promise_end) - x(cut.evict_at), 3), height: 5,
          });
          g.appendChild(titled(rect, `${name}: job ${cut.job_id} (${cut.owner}, ${cut.cpus} cpus, ${cut.slot}) evicted at ${stamp(cut.evict_at)}, ${span(cut.cut_by)} before its promise ends (${stamp(cut.promise_end)}); ${number(cut.cut_badput)} core-s lost`));
        }
      }
      const promises = row.promises;
      if (promises && typeof promises.completion === "number") {
        const dot = svg("circle", {
          class: promises.on_time ? "promise" : "promise late", cx: x(promises.completion), cy: mid, r: 5,
        });
        const verdict = promises.on_time ? "on time" : `late by ${span(promises.late_by)}`;
        g.appendChild(titled(dot, `${name}: empty by its promises ${when(promises.completion)}: ${verdict}`));
      }
      if (typeof empty === "number") {
        const cx = x(empty);
        const diamond = svg("path", { class: "planned", d: `M${cx} ${mid - 6}L${cx + 6} ${mid}L${cx} ${mid + 6}L${cx - 6} ${mid}Z` });
        g.appendChild(titled(diamond, `${name}: empty as planned ${when(empty)}`));
      }
      chart.appendChild(g);
    });

    if (inside(now)) {
      chart.appendChild(svg("line", { id: "now-line", class: "now", x1: x(now), x2: x(now), y1: AXIS_H - 4, y2: height }));
      chart.appendChild(svg("text", { class: "now-label", x: x(now) + 3, y: 10 }, "now"));
    }
    state.scale = { t0, t1, width };
  }

  function cell(text, cls) {
    return el("td", cls ? { class: cls } : {}, text);
  }

  // The owners' answers to the machine's notices: "web/prod/front accepted; batch/etl
  // declined by bob: month-end run".
  function ownersText(row) {
    const parts = [];
    for (const notice of row.notices || []) {
      const answer = notice.answer;
      if (!answer) {
        parts.push(`${notice.group} not answered`);
      } else if (answer.verdict === "accept") {
        parts.push(`${notice.group} accepted`);
      } else {
        const done = typeof answer.expected_completion === "number" ? `, done by ${stamp(answer.expected_completion)}` : "";
        parts.push(`${notice.group} declined by ${answer.who}: ${answer.reason}${done}`);
      }
    }
    return parts.length ? parts.join("; ") : "—";
  }

  function drawTable(plan) {
    const body = $("machines").tBodies[0];
    body.replaceChildren();
    for (const row of plan.machines || []) {
      const name = hostname(row);
      const tr = el("tr", { "data-machine": name });
      if ((row.nodes || []).some((n) => n.lost)) tr.classList.add("lost");
      else if (row.figures_stale) tr.classList.add("stale");
      const drain = row.drain;
      const promises = row.promises;
      const planned = row.as_planned;
      const w = row.window || {};
      const windowText = `${stamp(w.start)} → ${typeof w.end === "number" ? stamp(w.end) : "open"}`;
      let escalation = "—";
      let escalationClass = "escalation";
      if (planned && planned.will_escalate) {
        const jobs = (planned.cuts || []).map((c) => `job ${c.job_id} (${c.owner}) cut by ${span(c.cut_by)}`);
        escalation = `${planned.escalation} at the window: ${jobs.join("; ")}`;
        escalationClass = "escalation cuts";
      } else if (planned && planned.escalated) {
        escalation = `${planned.escalation}: told`;
      }
      tr.append(
        cell(name),
        cell(row.mode),
        cell(row.node || "no node"),
        cell(drain && drain.state !== "none" ? `${drain.schedule || ""} ${drain.state}`.trim() : "none"),
        cell(windowText),
        cell(when(row.planned_drain_start)),
        cell(promises ? `${when(promises.completion)}${promises.on_time ? "" : `: late by ${span(promises.late_by)}`}` : "—",
          promises && !promises.on_time ? "late" : null),
        cell(planned ? when(planned.completion) : "—"),
        cell(escalation, escalationClass),
        cell(ownersText(row), (row.notices || []).some((n) => n.answer && n.answer.verdict === "decline") ? "owners declined" : "owners"),
      );
      body.appendChild(tr);
    }
  }

  function drawPlan() {
    const plan = state.plan;
    if (!plan) return;
    drawTotals(plan.totals || {});
    const shown = (plan.machines || []).length;
    const total = plan.totals ? plan.totals.machines : shown;
    $("shown").textContent = shown < total ? `(${shown} of ${total} machines)` : "";
    drawTimeline(plan);
    drawTable(plan);
  }

  // The now line moves with the clock between two plans.
  function moveNow() {
    const line = $("now-line");
    const scale = state.scale;
    if (!line || !scale) return;
    const now = masterNow();
    if (now > scale.t1) {
      drawPlan();
      return;
    }
    const x = LABEL_W + ((now - scale.t0) / (scale.t1 - scale.t0)) * (scale.width - LABEL_W - RIGHT);
    line.setAttribute("x1", x);
    line.setAttribute("x2", x);
  }

  // --- the operations -------------------------------------------------------------------

  function batchText(batch) {
    const nodes = batch.nodes || [];
    if (nodes.length === 1 && nodes[0].name === batch.name && nodes[0].phase === batch.state) {
      return `${batch.name}: ${batch.state}`; // a batch per host
    }
    const phases = nodes.map((n) => `${n.name} ${n.phase}`).join(", ");
    return `${batch.name}: ${batch.state}${phases ? ` (${phases})` : ""}`;
  }

  function reasonText(reason) {
    if (!reason) return "";
    if (typeof reason === "string") return reason;
    const bits = [reason.code || "held"];
    if (reason.message) bits.push(reason.message);
    if (reason.code === "badput_budget") bits.push(`${number(reason.badput)} > ${number(reason.budget)} core-s`);
    if (reason.nodes) bits.push(reason.nodes.join(", "));
    if (typeof reason.until === "number") bits.push(`until ${stamp(reason.until)}`);
    return bits.join(": ");
  }

  // The ETA of an unfinished operation, from the batches finished so far: their mean
  // duration for each batch still to go, `batches` at a time.
  function eta(op) {
    const batches = op.batches || [];
    const finished = batches.filter((b) => b.state === "done" && b.started_at && b.ended_at);
    const open = batches.filter((b) => !["done", "failed", "skipped", "cancelled"].includes(b.state));
    if (!open.length || op.ended_at) return null;
    if (!finished.length) return { text: "ETA: once a batch is done" };
    const mean = finished.reduce((s, b) => s + (b.ended_at - b.started_at), 0) / finished.length;
    const parallel = Math.max(1, (op.spec && op.spec.batches) || 1);
    const now = masterNow();
    const running = open.filter((b) => b.started_at);
    const waiting = open.length - running.length;
    const runningEnd = running.reduce((m, b) => Math.max(m, b.started_at + mean), now);
    const at = Math.max(runningEnd, now) + Math.ceil(waiting / parallel) * mean;
    return { at, text: `ETA ≈ ${when(at)} (from the ${finished.length} batch(es) done)` };
  }

  function drawOperations() {
    const box = $("operations");
    box.replaceChildren();
    const ops = state.operations || [];
    if (!ops.length) {
      box.appendChild(el("p", { class: "muted" }, "none"));
      return;
    }
    for (const op of ops.slice(0, 20)) {
      const spec = op.spec || {};
      const article = el("article", { class: "operation", "data-id": op.id, "data-state": op.state });
      article.appendChild(el("h3", {}, `Operation ${op.id} · ${op.state} · hook ${spec.hook} · ${spec.schedule} · by ${op.actor}`));
      const counts = op.counts || {};
      const line = [`${number(counts.finished)} of ${number(counts.batches)} batches finished`, `started ${when(op.created_at)}`];
      if (op.ended_at) line.push(`ended ${when(op.ended_at)}`);
      const estimate = eta(op);
      if (estimate) line.push(estimate.text);
      article.appendChild(el("p", { class: "progress" }, line.join(" · ")));
      if (op.reason) article.appendChild(el("p", { class: "reason" }, reasonText(op.reason)));
      const list = el("ol", { class: "batches" });
      for (const batch of op.batches || []) {
        const item = el("li", { class: "batch", "data-state": batch.state }, batchText(batch));
        const why = reasonText(batch.reason);
        if (why) item.setAttribute("title", why);
        list.appendChild(item);
      }
      article.appendChild(list);
      box.appendChild(article);
    }
  }

  // --- the events -----------------------------------------------------------------------

  function live(mode, text) {
    const badge = $("live");
    badge.dataset.state = mode;
    badge.textContent = text;
  }

  function showEvent(event) {
    if (typeof event.id === "number") {
      if (state.eventsSeen.has(event.id)) return;
      state.eventsSeen.add(event.id);
      state.lastEventId = Math.max(state.lastEventId || 0, event.id);
    }
    const list = $("events");
    const item = el("li", { "data-type": event.type, "data-id": event.id });
    const time = typeof event.time === "number" ? event.time : masterNow();
    item.append(el("time", { datetime: new Date(time * 1000).toISOString() }, stamp(time)),
      el("span", { class: "type" }, event.type), el("span", { class: "text" }, event.text || ""));
    list.insertBefore(item, list.firstChild);
    while (list.children.length > EVENTS_KEPT) list.removeChild(list.lastChild);
  }

  function onEvent(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (err) {
      return;
    }
    if (!event || typeof event !== "object") return;
    if (event.type === undefined) event.type = message.type;
    if (event.id === undefined && message.lastEventId) event.id = Number(message.lastEventId);
    showEvent(event);
    planSoon();
    if (String(event.type).startsWith("operation.")) readOperations();
    if (event.type === "leader.elected") readLeader();
  }

  function follow() {
    if (typeof EventSource === "undefined") {
      live("polling", `polling every ${POLL_MS / 1000} s`);
      return;
    }
    // The last events at first; after a refusal, from the newest one shown (the browser's
    // own reconnection sends Last-Event-ID by itself).
    const from = state.lastEventId === null ? `last=${EVENTS_KEPT}` : `since=${state.lastEventId}`;
    const source = new EventSource(`${EVENTS_PATH}?${from}`);
    state.events = source;
    source.onopen = () => {
      live("live", "live");
      planSoon();
    };
    source.onmessage = onEvent;
    for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (no event stream on this master, or the token): poll, and try again later.
        live("polling", `no event stream: polling every ${POLL_MS / 1000} s`);
        setTimeout(follow, EVENTS_RETRY_MS);
      } else {
        live("reconnecting", "reconnecting…");
      }
    };
  }

  // --- start ----------------------------------------------------------------------------

  function redraw() {
    drawPlan();
    drawOperations();
    const list = $("events");
    for (const item of list.querySelectorAll("time")) {
      item.textContent = stamp(new Date(item.getAttribute("datetime")).getTime() / 1000);
    }
  }

  function start() {
    const toggle = $("utc");
    try {
      state.utc = window.localStorage.getItem("nodeagent.utc") === "1";
    } catch (err) {
      state.utc = false;
    }
    toggle.checked = state.utc;
    toggle.addEventListener("change", () => {
      state.utc = toggle.checked;
      try {
        window.localStorage.setItem("nodeagent.utc", state.utc ? "1" : "0");
      } catch (err) {
        // storage refused: the choice lasts as long as the page
      }
      redraw();
    });
    let resized = null;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(drawPlan, 150);
    });
    readLeader();
    readPlan();
    readOperations();
    follow();
    setInterval(planSoon, POLL_MS);
    setInterval(readOperations, POLL_MS);
    setInterval(moveNow, 1000);
  }

  start();
})();
