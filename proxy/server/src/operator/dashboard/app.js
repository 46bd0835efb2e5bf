// oram-proxy dashboard: polls /dashboard/data and draws the client requests beside
// the backend requests. No dependencies, no build step. Object labels come from
// clients: they are only ever set as text (textContent), never as HTML.
"use strict";
(function () {
  const WINDOW_MS = 60000;   // what the plots show
  const BINS = 32;           // histogram bins
  const POLL_MS = 1000;
  const MAX_KEEP = 30000;    // events kept per side at most
  const COLORS = {
    get: "#4fc3f7", get_range: "#29b6f6", put: "#ffb74d", delete: "#ef5350", list: "#a5d6a7",
    read: "#4fc3f7", write: "#ffb74d",
  };

  // The token comes in the URL fragment (never sent to the server), is kept for
  // the tab's session, and is removed from the address bar.
  let token = null;
  function readToken() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      token = decodeURIComponent(m[1]);
      try { sessionStorage.setItem("oram-proxy-token", token); } catch (e) { /* private mode */ }
      history.replaceState(null, "", location.pathname);
    } else if (token === null) {
      try { token = sessionStorage.getItem("oram-proxy-token"); } catch (e) { token = null; }
    }
  }
  readToken();
  window.addEventListener("hashchange", readToken);

  const state = {
    nextB: 0, nextC: 0, backend: [], client: [], layout: "tree", last: null, updates: 0,
  };
  const $ = (id) => document.getElementById(id);

  function setText(id, text) { const el = $(id); if (el) el.textContent = text; }

  function fmtBytes(n) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n.toFixed(0)) + " " + u[i];
  }

  function fmtAge(s) {
    if (s < 90) return s.toFixed(0) + " s";
    if (s < 5400) return (s / 60).toFixed(0) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  // Pearson's chi-square over the bins divided by its degrees of freedom: about 1
  // when the counts are uniform, far above 1 when some bins are hot.
  function chi(counts) {
    const n = counts.reduce((a, b) => a + b, 0);
    if (n < 2 * counts.length) return null;
    const e = n / counts.length;
    let x2 = 0;
    for (const c of counts) x2 += (c - e) * (c - e) / e;
    return x2 / (counts.length - 1);
  }

  function canvasCtx(id) {
    const c = $(id);
    const ctx = c.getContext("2d");
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.strokeStyle = "#273140";
    ctx.lineWidth = 1;
    for (let i = 1; i < 4; i++) {
      const y = Math.round(c.height * i / 4) + 0.5;
      ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(c.width, y); ctx.stroke();
    }
    return [c, ctx];
  }

  // `scale`: the part of the axis shown (1: all of it).
  function drawStream(id, events, now, colorOf, scale) {
    const [c, ctx] = canvasCtx(id);
    const pad = 4;
    for (const ev of events) {
      if (ev.x === null) continue;
      const age = now - ev.t;
      if (age > WINDOW_MS) continue;
      const px = (1 - age / WINDOW_MS) * (c.width - 2 * pad) + pad;
      const py = (1 - ev.x / scale) * (c.height - 2 * pad) + pad;
      ctx.fillStyle = colorOf(ev);
      ctx.fillRect(px - 1, py - 1, 3, 3);
    }
    ctx.fillStyle = "#7a8696";
    ctx.font = "11px sans-serif";
    ctx.fillText("-60 s", 4, c.height - 4);
    ctx.fillText("now", c.width - 26, c.height - 4);
  }

  function drawHist(id, counts, color) {
    const [c, ctx] = canvasCtx(id);
    const max = Math.max(1, ...counts);
    const w = c.width / counts.length;
    ctx.fillStyle = color;
    counts.forEach((n, i) => {
      const h = (n / max) * (c.height - 14);
      ctx.fillRect(i * w + 1, c.height - h, w - 2, h);
    });
    const total = counts.reduce((a, b) => a + b, 0);
    if (total > 0) {
      const mean = total / counts.length;
      const y = c.height - (mean / max) * (c.height - 14);
      ctx.strokeStyle = "#d8dee9";
      ctx.setLineDash([4, 4]);
      ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(c.width, y); ctx.stroke();
      ctx.setLineDash([]);
    }
  }

  function bins(values, scale) {
    const counts = new Array(BINS).fill(0);
    for (const x of values) counts[Math.min(BINS - 1, Math.floor(x / scale * BINS))]++;
    return counts;
  }

  function setChi(id, v) {
    const el = $(id);
    el.textContent = v === null ? "– (too few)" : v.toFixed(2);
    el.dataset.value = v === null ? "" : String(v);
  }

  function fillTable(id, rows) {
    const body = $(id).tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    for (const r of rows) {
      const tr = document.createElement("tr");
      r.forEach((cell, i) => {
        const td = document.createElement("td");
        td.textContent = String(cell);
        if (i > 0) td.className = "num";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
  }

  function trim(list, now) {
    let i = 0;
    while (i < list.length && now - list[i].t > WINDOW_MS) i++;
    if (list.length - i > MAX_KEEP) i = list.length - MAX_KEEP;
    if (i > 0) list.splice(0, i);
  }

  function render(d, now) {
    state.layout = d.layout;
    document.body.dataset.layout = d.layout;
    document.body.dataset.engine = d.engine;
    setText("engine", d.engine + (d.layout === "blocks" ? " (no ORAM)" : " ORAM"));
    const s = d.summary;
    const prev = state.last;
    if (prev) {
      const dt = Math.max(0.001, s.uptime_s - prev.uptime_s);
      setText("client-rate", ((s.client_requests - prev.client_requests) / dt).toFixed(1));
      setText("backend-rate", ((s.backend_requests - prev.backend_requests) / dt).toFixed(1));
    }
    state.last = s;
    setText("overhead", s.client_bytes > 0 ? (s.backend_bytes / s.client_bytes).toFixed(1) + "×" : "–");
    setText("stash", s.stash_bound > 0 ? s.stash + " / " + s.stash_bound + " (max " + s.stash_max + ")" : "none");
    setText("pending", String(s.pending_writebacks));
    setText("checkpoint", fmtAge(s.checkpoint_age_s));
    setText("capacity", (100 * d.used_blocks / Math.max(1, d.capacity_blocks)).toFixed(1) + "% of " +
      fmtBytes(d.capacity_blocks * d.block_size));
    renderCapacity(d);
    if (d.layout === "tree") {
      setText("backend-note", "Each dot is a request to the object store; its height is the bucket's place " +
        "within its tree level, its colour the verb. Every access reads one uniformly random path: whatever " +
        "the clients do, the reads of the deepest level spread evenly.");
    }

    // Clients.
    drawStream("client-stream", state.client, now, (ev) => ev.read ? COLORS.read : COLORS.write, 1);
    const objs = state.client.filter((ev) => ev.x !== null && now - ev.t <= WINDOW_MS);
    setText("client-count", String(objs.length));
    const cc = bins(objs.map((ev) => ev.x), 1);
    drawHist("client-hist", cc, COLORS.read);
    setChi("client-chi", chi(cc));
    const per = new Map();
    for (const ev of objs) per.set(ev.label, (per.get(ev.label) || 0) + 1);
    const top = [...per.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8);
    fillTable("client-top", top.map(([l, n]) => [l, n, (100 * n / objs.length).toFixed(0) + "%"]));

    // Backend. Blocks of `direct` are drawn over the range in use (they sit at the
    // start of a mostly empty volume); tree positions always span their level.
    const recent = state.backend.filter((ev) => now - ev.t <= WINDOW_MS);
    let scale = 1;
    if (d.layout === "blocks") {
      const top = recent.reduce((a, ev) => ev.x === null ? a : Math.max(a, ev.x), 0);
      scale = Math.min(1, Math.max(top * 1.05, 8 / Math.max(1, d.capacity_blocks)));
      setText("backend-note", "Each dot is a request to the object store; its height is the block number " +
        "(blocks 0 to " + Math.ceil(scale * d.capacity_blocks) + " of " + d.capacity_blocks +
        " shown), its colour the verb. The direct engine has no ORAM: every request tells the provider " +
        "which block it is for, so a hot object is a line here too.");
    }
    drawStream("backend-stream", state.backend, now, (ev) => ev.ok ? (COLORS[ev.verb] || "#fff") : COLORS.delete,
      scale);
    setText("backend-count", String(recent.length));
    let counted;
    if (d.layout === "tree") {
      // One read per path at the deepest level: independent, uniform positions.
      const deepest = recent.reduce((a, ev) => Math.max(a, ev.level), -1);
      counted = recent.filter((ev) => ev.x !== null && ev.level === deepest &&
        (ev.verb === "get" || ev.verb === "get_range"));
    } else {
      counted = recent.filter((ev) => ev.x !== null &&
        (ev.verb === "get" || ev.verb === "get_range" || ev.verb === "put"));
    }
    setText("backend-hist-n", String(counted.length));
    const bc = bins(counted.map((ev) => ev.x), scale);
    drawHist("backend-hist", bc, COLORS.get);
    setChi("backend-chi", chi(bc));
    const verbs = new Map();
    for (const ev of recent) {
      const v = verbs.get(ev.verb) || { n: 0, bytes: 0, ms: 0, err: 0 };
      v.n++; v.bytes += ev.size; v.ms += ev.dur; v.err += ev.ok ? 0 : 1;
      verbs.set(ev.verb, v);
    }
    fillTable("backend-verbs", [...verbs.entries()].map(([k, v]) =>
      [k, v.n, fmtBytes(v.bytes), (v.ms / v.n).toFixed(1), v.err]));
  }

  // The capacity in effect, used and free, the automatic growth's limits, the
  // growth under way and the growth history (newest first). The numbers are
  // also in data attributes, for tests.
  function renderCapacity(d) {
    const g = d.growth || {};
    const bs = d.block_size;
    const cells = [["cap-total", d.capacity_blocks], ["cap-used", d.used_blocks], ["cap-free", d.free_blocks]];
    for (const [id, blocks] of cells) {
      setText(id, fmtBytes(blocks * bs) + " (" + blocks + " blocks)");
      $(id).dataset.blocks = String(blocks);
    }
    const share = d.used_blocks / Math.max(1, d.capacity_blocks);
    const bar = $("cap-bar");
    bar.style.width = (100 * share).toFixed(1) + "%";
    bar.className = share >= 0.9 ? "high" : "";
    const max = g.max_size_bytes || 0;
    let policy = "off";
    if (g.grow_at > 0) {
      policy = "at " + (100 * g.grow_at).toFixed(0) + "% used, up to " + fmtBytes(max);
      if (max > 0 && d.capacity_blocks * bs >= max) policy += " (reached: no more room to grow by itself)";
    }
    setText("cap-policy", policy);
    const st = $("grow-state");
    st.dataset.running = g.running ? "1" : "0";
    st.dataset.finished = String(g.finished || 0);
    if (g.running) {
      setText("grow-state", "growing from " + fmtBytes(g.from_blocks * bs) + " to " + fmtBytes(g.to_blocks * bs) +
        ": " + g.done + " of " + (g.total || "?") + " new positions written");
    } else if (g.error) {
      setText("grow-state", "the last growth failed: " + g.error);
    } else {
      setText("grow-state", "none under way (" + (g.finished || 0) + " finished since start)");
    }
    const hist = (g.history || []).slice().reverse();
    fillTable("grow-history", hist.map((h) => [
      new Date(h.finished_unix * 1000).toLocaleString(),
      fmtBytes(h.from_blocks * h.block_size),
      fmtBytes(h.to_blocks * h.block_size),
      h.written + " of " + h.positions,
      fmtBytes(h.backend_bytes),
      fmtAge(Math.max(0, h.finished_unix - h.started_unix)),
    ]));
  }

  async function poll() {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    try {
      const r = await fetch("/dashboard/data?b=" + state.nextB + "&c=" + state.nextC,
        { headers, cache: "no-store" });
      if (r.status === 401) {
        $("status").className = "status error";
        setText("status", "token required: open /dashboard#token=<the metrics token>");
        return;
      }
      if (!r.ok) throw new Error("HTTP " + r.status);
      const d = await r.json();
      const local = performance.now();
      // Place server times on the local clock.
      for (const e of d.backend.events) {
        state.backend.push({ t: local - (d.backend.now_ms - e[0]), verb: e[1], x: e[2], level: e[3],
          size: e[4], dur: e[5], ok: e[6] === 1 });
      }
      for (const e of d.client.events) {
        state.client.push({ t: local - (d.client.now_ms - e[0]), api: e[1], op: e[2], x: e[3],
          label: e[4], read: e[5] === 1, status: e[6], size: e[7], dur: e[8] });
      }
      state.nextB = d.backend.next;
      state.nextC = d.client.next;
      trim(state.backend, local);
      trim(state.client, local);
      render(d, local);
      state.updates++;
      const u = $("updates");
      u.textContent = String(state.updates);
      u.dataset.count = String(state.updates);
      $("status").className = "status live";
      setText("status", "live · " + new Date().toLocaleTimeString());
    } catch (err) {
      $("status").className = "status error";
      setText("status", "no data: " + err.message);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  function legend() {
    const el = $("legend");
    for (const [name, color] of [["GET", COLORS.get], ["ranged GET", COLORS.get_range], ["PUT", COLORS.put],
      ["DELETE / error", COLORS.delete], ["client read", COLORS.read], ["client write", COLORS.write]]) {
      const s = document.createElement("span");
      s.className = "swatch";
      s.style.background = color;
      el.appendChild(s);
      el.appendChild(document.createTextNode(name));
    }
  }

  setText("window-s", String(WINDOW_MS / 1000));
  legend();
  poll();
})();
