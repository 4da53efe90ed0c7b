// The aria web page: a form that posts /v1/generate and a job list that polls /v1/jobs/{id}.
// Plain browser JavaScript, no libraries, nothing fetched from anywhere but this server.
"use strict";

(function () {
  const POLL_MS = 700;
  const ACTIVE = new Set(["queued", "running"]);
  const $ = (id) => document.getElementById(id);

  // A token given in the page's address (?token=…) goes with every request.
  const token = new URLSearchParams(location.search).get("token");

  // This browser's client key, made once and kept: the server shows a client only its own
  // jobs (sent as X-Aria-Client, or ?client= on links the browser follows itself).
  const client = (function () {
    const KEY = "aria-client-key";
    let k = null;
    try {
      k = localStorage.getItem(KEY);
    } catch (_) {}
    if (!k) {
      const bytes = new Uint8Array(16);
      crypto.getRandomValues(bytes);
      k = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      try {
        localStorage.setItem(KEY, k);
      } catch (_) {}
    }
    return k;
  })();

  function withToken(url) {
    url += (url.includes("?") ? "&" : "?") + "client=" + encodeURIComponent(client);
    if (!token) return url;
    return url + "&token=" + encodeURIComponent(token);
  }

  async function api(method, url, body) {
    const opts = { method, headers: { "X-Aria-Client": client } };
    if (token) opts.headers["Authorization"] = "Bearer " + token;
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(url, opts);
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = { error: text };
    }
    if (!res.ok) {
      const err = new Error(describeError(res, data));
      err.status = res.status;
      err.retryAfter = res.headers.get("Retry-After");
      throw err;
    }
    return data;
  }

  function describeError(res, data) {
    let msg = (data && (data.error || data.message)) || res.statusText || "request failed";
    if (data && data.limit) msg += " [limit: " + data.limit + "]";
    else if (data && data.field) msg += " [field: " + data.field + "]";
    if (res.status === 429) {
      const after = res.headers.get("Retry-After");
      msg = "The queue is full" + (after ? "; try again in " + after + " s" : "") + ". " + msg;
    }
    return msg + " (HTTP " + res.status + ")";
  }

  function showError(msg) {
    const el = $("error");
    if (!msg) {
      el.hidden = true;
      el.textContent = "";
      return;
    }
    el.textContent = msg;
    el.hidden = false;
  }

  // ---- /info: model line, limits, steering directions, warm start ----

  let info = null;

  function directionsOf(inf) {
    const raw =
      inf.steer_directions || inf.directions || inf.steering ||
      (inf.steer && (inf.steer.directions || inf.steer)) || [];
    if (!Array.isArray(raw)) return [];
    return raw
      .map((d) => (typeof d === "string" ? { name: d } : d))
      .filter((d) => d && typeof d.name === "string");
  }

  function limitsOf(inf) {
    return inf.limits || {};
  }

  function applyInfo(inf) {
    info = inf;
    const lim = limitsOf(inf);
    const model = inf.model || {};
    const parts = [];
    const name = typeof model === "string" ? model : model.name || model.kind || model.path;
    if (name) parts.push(name);
    if (inf.precision || model.precision) parts.push(inf.precision || model.precision);
    if (inf.device || model.device) parts.push(inf.device || model.device);
    const maxS = lim.seconds || lim.max_seconds || model.max_seconds;
    if (maxS) parts.push("up to " + Number(maxS).toFixed(1) + " s");
    $("model-info").textContent = parts.length ? parts.join(" · ") : "ready";

    const sec = $("seconds");
    if (maxS) {
      sec.max = String(maxS);
      if (Number(sec.value) > maxS) sec.value = String(Math.floor(maxS * 10) / 10);
    }
    const steps = $("steps");
    const maxSteps = lim.steps || lim.max_steps;
    if (maxSteps) steps.max = String(maxSteps);
    const defSteps = (inf.defaults && inf.defaults.steps) || model.default_steps;
    if (defSteps) steps.placeholder = String(defSteps);
    const defCfg = (inf.defaults && inf.defaults.cfg) || model.default_cfg;
    if (defCfg !== undefined && defCfg !== null) $("cfg").placeholder = String(defCfg);
    const pchars = lim.prompt_chars;
    if (pchars) {
      $("prompt").maxLength = pchars;
      $("negative_prompt").maxLength = pchars;
    }

    const warm = inf.warm_start !== undefined ? inf.warm_start : inf.cache;
    const warmOk = warm === true || (warm && typeof warm === "object" && warm.enabled !== false);
    $("warm_start").disabled = !warmOk;
    $("warm-hint").textContent = warmOk
      ? "(from a close cached result)"
      : "(this server has no warm-start cache)";

    buildSteering(directionsOf(inf));
  }

  function buildSteering(dirs) {
    const list = $("steer-list");
    list.textContent = "";
    $("steer-section").hidden = dirs.length === 0;
    dirs.forEach((d, i) => {
      const row = document.createElement("div");
      row.className = "steer-row";
      const id = "steer-" + i;
      const lo = d.min !== undefined ? d.min : -4;
      const hi = d.max !== undefined ? d.max : 4;
      const label = document.createElement("label");
      label.htmlFor = id;
      label.textContent = d.label || d.name;
      if (d.description) label.title = d.description;
      const input = document.createElement("input");
      input.type = "range";
      input.id = id;
      input.min = String(lo);
      input.max = String(hi);
      input.step = String(d.step || (hi - lo) / 80);
      input.value = "0";
      input.dataset.name = d.name;
      if (d.site) input.dataset.site = d.site;
      const out = document.createElement("output");
      out.htmlFor = id;
      out.id = id + "-value";
      out.textContent = "0";
      input.addEventListener("input", () => {
        out.textContent = Number(input.value).toFixed(2);
        row.classList.toggle("on", Number(input.value) !== 0);
      });
      row.append(label, input, out);
      list.append(row);
    });
  }

  async function loadInfo() {
    try {
      applyInfo(await api("GET", "/info"));
    } catch (e) {
      $("model-info").textContent = "server unavailable: " + e.message;
    }
  }

  // ---- the form ----

  function numberOrNull(id) {
    const v = $(id).value.trim();
    if (v === "") return null;
    const n = Number(v);
    return Number.isFinite(n) ? n : NaN;
  }

  function collectRequest() {
    const prompt = $("prompt").value.trim();
    if (!prompt) throw new Error("Write a prompt first.");
    const body = { prompt };
    const neg = $("negative_prompt").value.trim();
    if (neg) body.negative_prompt = neg;
    for (const [id, key, int] of [
      ["seconds", "seconds", false],
      ["steps", "steps", true],
      ["cfg", "cfg", false],
      ["seed", "seed", true],
    ]) {
      const n = numberOrNull(id);
      if (n === null) continue;
      if (Number.isNaN(n) || (int && !Number.isInteger(n)) || n < 0) {
        throw new Error(id + ": not a valid " + (int ? "whole number" : "number"));
      }
      body[key] = n;
    }
    if ($("warm_start").checked) body.warm_start = true;
    const steer = [];
    for (const input of $("steer-list").querySelectorAll("input[type=range]")) {
      const s = Number(input.value);
      if (s !== 0) {
        const item = { name: input.dataset.name, strength: s };
        if (input.dataset.site) item.site = input.dataset.site;
        steer.push(item);
      }
    }
    if (steer.length) body.steer = steer;
    return body;
  }

  async function onSubmit(ev) {
    ev.preventDefault();
    showError(null);
    let body;
    try {
      body = collectRequest();
    } catch (e) {
      showError(e.message);
      return;
    }
    const btn = $("generate");
    btn.disabled = true;
    try {
      const r = await api("POST", "/v1/generate", body);
      const job = { id: r.id, state: r.state || "queued", position: r.position, progress: 0 };
      addJob(job, body.prompt, body);
      poll(job.id);
    } catch (e) {
      showError(e.message);
    } finally {
      btn.disabled = false;
    }
  }

  // ---- the job list ----

  const jobs = new Map(); // id -> { el, state, timer }

  function updateEmpty() {
    $("jobs-empty").hidden = jobs.size > 0;
    let active = 0;
    for (const j of jobs.values()) if (ACTIVE.has(j.state)) active++;
    $("queue-info").textContent = active ? active + " active" : "";
  }

  function describeRequest(req) {
    if (!req) return "";
    const bits = [];
    if (req.seconds) bits.push(Number(req.seconds).toFixed(1) + " s");
    if (req.steps) bits.push(req.steps + " steps");
    if (req.cfg !== undefined && req.cfg !== null) bits.push("cfg " + req.cfg);
    if (req.seed !== undefined && req.seed !== null) bits.push("seed " + req.seed);
    if (req.warm_start) bits.push("warm start");
    if (req.steer && req.steer.length) bits.push(req.steer.length + " steering");
    return bits.join(" · ");
  }

  function addJob(job, prompt, req) {
    if (jobs.has(job.id)) return jobs.get(job.id);
    const el = $("job-template").content.firstElementChild.cloneNode(true);
    el.id = "job-" + job.id;
    el.dataset.id = job.id;
    el.querySelector(".job-prompt").textContent = prompt || job.prompt || job.id;
    el.querySelector(".job-meta").textContent = describeRequest(req || job.request || job.spec);
    el.querySelector(".job-cancel").addEventListener("click", () => cancel(job.id));
    el.querySelector(".job-remove").addEventListener("click", () => {
      el.remove();
      jobs.delete(job.id);
      updateEmpty();
    });
    $("jobs").prepend(el);
    const entry = { el, state: null, timer: null, meta: el.querySelector(".job-meta").textContent };
    jobs.set(job.id, entry);
    render(job);
    return entry;
  }

  function render(job) {
    const entry = jobs.get(job.id);
    if (!entry) return;
    const el = entry.el;
    const state = job.state || "queued";
    entry.state = state;
    el.dataset.state = state;
    const badge = el.querySelector(".job-state");
    badge.textContent = state;
    badge.className = "badge job-state state-" + state;

    const prog = el.querySelector(".job-progress");
    const p = typeof job.progress === "number" ? job.progress : state === "done" ? 1 : 0;
    prog.value = Math.max(0, Math.min(1, p));
    prog.hidden = !ACTIVE.has(state);
    const bits = [];
    if (state === "queued" && job.position !== undefined && job.position !== null) {
      bits.push("position " + job.position + " in queue");
    }
    if (state === "running" && job.steps) bits.push("step " + (job.step || 0) + " / " + job.steps);
    if (state === "running" && !job.steps) bits.push(Math.round(p * 100) + "%");
    if (entry.meta) bits.push(entry.meta);
    el.querySelector(".job-meta").textContent = bits.join(" · ");
    prog.setAttribute("aria-label", "progress " + Math.round(p * 100) + "%");

    const err = el.querySelector(".job-error");
    if (state === "failed" && job.error) {
      err.textContent = job.error;
      err.hidden = false;
    } else {
      err.hidden = true;
    }
    el.querySelector(".job-cancel").hidden = !ACTIVE.has(state);
    el.querySelector(".job-remove").hidden = ACTIVE.has(state);
    if (state === "done") showResult(job.id, el);
    updateEmpty();
  }

  function showResult(id, el) {
    const result = el.querySelector(".job-result");
    if (!result.hidden) return;
    const base = "/v1/jobs/" + encodeURIComponent(id);
    const audio = el.querySelector(".job-audio");
    audio.src = withToken(base + "/audio");
    audio.id = "audio-" + id;
    el.querySelector(".job-waveform").src = withToken(base + "/waveform.png");
    el.querySelector(".job-spectrogram").src = withToken(base + "/spectrogram.png");
    const dl = el.querySelector(".job-download");
    dl.href = withToken(base + "/audio");
    dl.setAttribute("download", "aria-" + id + ".wav");
    result.hidden = false;
  }

  async function poll(id) {
    const entry = jobs.get(id);
    if (!entry) return;
    clearTimeout(entry.timer);
    try {
      const job = await api("GET", "/v1/jobs/" + encodeURIComponent(id));
      job.id = job.id || id;
      render(job);
      if (ACTIVE.has(job.state)) entry.timer = setTimeout(() => poll(id), POLL_MS);
    } catch (e) {
      if (e.status === 404) {
        render({ id, state: "failed", error: "the server no longer knows this job" });
      } else {
        // A transient failure (server restarting): keep trying, more slowly.
        entry.timer = setTimeout(() => poll(id), POLL_MS * 4);
      }
    }
  }

  async function cancel(id) {
    const entry = jobs.get(id);
    if (entry) entry.el.querySelector(".job-cancel").disabled = true;
    try {
      await api("DELETE", "/v1/jobs/" + encodeURIComponent(id));
    } catch (e) {
      showError("Cancel: " + e.message);
    } finally {
      if (entry) entry.el.querySelector(".job-cancel").disabled = false;
    }
    poll(id);
  }

  async function loadJobs() {
    try {
      const r = await api("GET", "/v1/jobs");
      const list = Array.isArray(r) ? r : (r && r.jobs) || [];
      // Oldest first, so that prepending leaves the newest on top.
      list
        .slice()
        .reverse()
        .forEach((j) => {
          if (!j || !j.id) return;
          const req = j.request || j.spec || null;
          addJob(j, j.prompt || (req && req.prompt), req);
          if (ACTIVE.has(j.state)) poll(j.id);
        });
    } catch (_) {
      // The list is a convenience; the form works without it.
    }
  }

  $("generate-form").addEventListener("submit", onSubmit);
  $("seed-dice").addEventListener("click", () => {
    $("seed").value = String(Math.floor(Math.random() * 1e9));
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("generate-form").requestSubmit();
  });

  loadInfo();
  loadJobs();
})();
