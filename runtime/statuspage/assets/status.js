// Polls status.json (runtime.Broker.Status) every second and renders one
// table per subscription, a row per shard.
"use strict";

const el = (tag, attrs, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
};

const num = (n) => Number(n || 0).toLocaleString("en-US");
const rate = (r) => (r || 0) < 10 ? (r || 0).toFixed(1) : Math.round(r).toLocaleString("en-US");
const outcomes = (o) => [o.acked, o.retried, o.rejected, o.dead_lettered].map(num).join(" / ");

function checkpoint(s) {
  const cp = s.checkpoint || "";
  if (cp === "") return "none yet";
  return s.sub_sequence && /^[0-9]+$/.test(cp) ? cp + "." + s.sub_sequence : cp;
}

// age is how long before the snapshot t was, or "—" when unknown.
function age(t, now) {
  if (!t) return "—";
  const ms = Math.max(0, new Date(now) - new Date(t));
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s ago";
  return Math.round(ms / 60000) + " min ago";
}

function behind(s) {
  if (!s.behind_at) return "—";
  const ms = s.millis_behind_latest;
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

// reads says whether the shard's reads answer: "ok", or how many failed
// in a row, the last one's error and when (a growing count is a stuck
// reader, not an idle one).
function reads(s, now) {
  if (!s.read_failures) return "ok";
  return `${num(s.read_failures)} failed, last ${age(s.read_error_at, now)}: ${s.read_error}`;
}

// textColumns are the columns of words, aligned left; the rest are
// numbers, aligned right.
const textColumns = new Set(["Shard", "Owner", "Lease", "Checkpoint", "Reads"]);

function owner(s, me) {
  if (!s.owner) return el("span", {}, "nobody");
  if (s.owner === me) return el("span", {class: "me"}, "this instance");
  return el("span", {}, s.owner);
}

function shardRow(sub, s, me, held, now) {
  const cell = (cls, ...c) => el("td", {class: cls}, ...c);
  const row = el("tr", {"data-stream": sub.stream, "data-shard": s.shard, class: held ? "held" : "elsewhere"},
    cell("shard", s.shard),
    cell("owner", owner(s, me)),
    cell("lease", s.lease + (s.handoff_to ? " → " + s.handoff_to : "")),
    cell("checkpoint", checkpoint(s)),
    cell("num age", age(s.checkpoint_at, now)),
    cell("num behind", held ? behind(s) : "—"),
    cell("reads", held ? reads(s, now) : "—"),
    cell("num handled", held ? num(s.handled) : "—"),
    cell("num rate", held ? rate(s.per_second) : "—"),
    cell("num outcomes", held ? outcomes(s.outcomes) : "—"),
    cell("num inflight", held ? num(s.in_flight) : "—"));
  if (held && s.behind_at && s.millis_behind_latest >= 60000) row.classList.add("behind");
  if (held && s.read_failures) row.classList.add("failing");
  return row;
}

function render(st) {
  const me = st.owner;
  document.getElementById("instance").replaceChildren(
    "Instance ", el("span", {id: "owner", class: "me"}, me || "(not connected)"),
    ` · leases held ${st.leases.held}, taken ${st.leases.taken}, lost ${st.leases.lost}, handed over ${st.leases.handed_over}`,
    " · updated ", el("span", {id: "updated"}, new Date(st.time).toLocaleTimeString()));
  const subs = st.subscriptions.map((sub) => {
    const head = el("tr", {},
      ...["Shard", "Owner", "Lease", "Checkpoint", "Stored", "Behind", "Reads", "Handled", "Per second", "Outcomes", "In flight"]
        .map((h) => el("th", {class: textColumns.has(h) ? "" : "num"}, h)));
    const rows = [
      ...sub.shards.map((s) => ({s, held: true})),
      ...sub.others.map((s) => ({s, held: false})),
    ].sort((a, b) => a.s.shard.localeCompare(b.s.shard)).map(({s, held}) => shardRow(sub, s, me, held, st.time));
    const meta = `${sub.state} · ${sub.workers} worker${sub.workers === 1 ? "" : "s"}${sub.by_key ? " by key" : ""}` +
      ` · handled ${num(sub.handled)} (${rate(sub.per_second)}/s; ${outcomes(sub.outcomes)})` +
      ` · queued ${num(sub.queue_depth)} · in flight ${num(sub.in_flight)}`;
    return el("section", {class: "subscription", "data-stream": sub.stream},
      el("h2", {}, sub.stream, sub.handler ? ` (${sub.handler})` : "", " ", el("span", {class: "meta"}, meta)),
      el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  });
  document.getElementById("subscriptions").replaceChildren(...subs);
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const res = await fetch("status.json", {cache: "no-store"});
    if (!res.ok) throw new Error(`status.json: ${res.status} ${res.statusText}`);
    render(await res.json());
    error.hidden = true;
  } catch (e) {
    error.textContent = "Cannot reach the service: " + e.message;
    error.hidden = false;
  }
  setTimeout(poll, 1000);
}

poll();
