// signoff's pages work without this file: every form posts and every page renders on the server.
// It only keeps pages live (Server-Sent Events from the API process), counts deadlines down, shows
// a tool call's edited arguments as they are typed and a values card's chosen option's fields.
(function () {
  "use strict";

  function announce(text) {
    var el = document.getElementById("announce");
    if (!el) return;
    el.textContent = "";
    window.setTimeout(function () { el.textContent = text; }, 60);
  }

  function fromHTML(html) {
    var t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  async function fetchPage(url) {
    var r = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (!r.ok && r.status !== 409) return null;
    return new DOMParser().parseFromString(await r.text(), "text/html");
  }

  // ---- the inbox: rows come and go as runs pause and requests are decided ----------------------
  function inbox(list) {
    var empty = document.querySelector("[data-inbox-empty]");
    var summary = document.querySelector("[data-inbox-summary]");
    var filtered = summary && summary.textContent.indexOf("(filtered)") >= 0;
    // the rows to decide, and those waiting on others (voted on): both leave when decided
    var own = function () { return Array.prototype.slice.call(list.querySelectorAll(":scope > li.req")); };
    var others = document.querySelector("[data-waiting-others]");
    var rows = function () {
      return own().concat(others ? Array.prototype.slice.call(others.querySelectorAll(":scope > li.req")) : []);
    };
    var find = function (id) { return rows().find(function (li) { return li.dataset.requestId === id; }); };

    function setCount(n, total) {
      if (total === undefined) total = n;
      document.querySelectorAll("[data-inbox-count]").forEach(function (el) {
        el.textContent = String(total);
        el.setAttribute("aria-label", total + " waiting");
      });
      document.title = (total ? "(" + total + ") " : "") + "Inbox · signoff";
      if (summary && !summary.hasAttribute("data-searched")) { // a search's count is the page's, not the stream's
        summary.textContent = (n === 1 ? "1 request waits for you" : n ? n + " requests wait for you" : "Nothing waits for you") +
          (filtered ? " (filtered)." : ".");
      }
    }
    function refreshEmpty() { if (empty) empty.hidden = own().length > 0; }

    var es = new EventSource(list.dataset.liveUrl);
    es.addEventListener("snapshot", function (e) {
      var d = JSON.parse(e.data);
      var keep = new Set(d.ids);
      rows().forEach(function (li) { if (!keep.has(li.dataset.requestId)) li.remove(); });
      setCount(d.count, d.total);
      refreshEmpty();
    });
    es.addEventListener("add", function (e) {
      var d = JSON.parse(e.data);
      if (find(d.id)) return;
      var li = fromHTML(d.html);
      if (!li) return;
      li.classList.add("is-new");
      var before = own().find(function (other) { return (other.dataset.paused || "") < (d.paused_at || ""); });
      list.insertBefore(li, before || null);
      var title = li.querySelector(".req-title");
      announce("New request: " + (title ? title.textContent.trim() : ""));
      refreshEmpty();
    });
    es.addEventListener("remove", function (e) {
      var d = JSON.parse(e.data);
      var li = find(d.id);
      if (!li) return;
      var hadFocus = li.contains(document.activeElement);
      var next = li.nextElementSibling || li.previousElementSibling;
      var heading = li.previousElementSibling;
      li.remove();
      // a flow's heading (the inbox grouped by flow) goes with its last row
      if (heading && heading.classList.contains("req-group") &&
          (!heading.nextElementSibling || !heading.nextElementSibling.classList.contains("req"))) heading.remove();
      if (hadFocus) {
        var target = next && next.querySelector("a, button");
        (target || document.getElementById("main")).focus();
      }
      announce("Request closed: " + d.why);
      refreshEmpty();
    });
    es.addEventListener("count", function (e) { var d = JSON.parse(e.data); setCount(d.count, d.total); });
  }

  // ---- the header's Inbox count, live on every page (the inbox's own stream carries it there) ----
  function setHeaderCount(total) {
    document.querySelectorAll("[data-inbox-count]").forEach(function (el) {
      el.textContent = String(total);
      el.setAttribute("aria-label", total + " waiting");
    });
  }
  function headerCount() {
    var es = new EventSource("/inbox/count/live");
    es.addEventListener("count", function (e) { setHeaderCount(JSON.parse(e.data).total); });
  }

  // ---- a run: its regions are fetched again when its log grows -------------------------------------
  function run(root) {
    var timer = null;
    async function refresh() {
      var doc = await fetchPage(window.location.href);
      if (!doc) return;
      document.querySelectorAll("[data-live-region]").forEach(function (el) {
        var fresh = doc.getElementById(el.id);
        if (!fresh) return;
        var open = new Set();
        el.querySelectorAll("details[open][data-key]").forEach(function (d) { open.add(d.dataset.key); });
        fresh.querySelectorAll("details[data-key]").forEach(function (d) { if (open.has(d.dataset.key)) d.open = true; });
        var inputOpen = el.querySelector("details.input-box[open]");
        var freshInput = fresh.querySelector("details.input-box");
        if (inputOpen && freshInput) freshInput.open = true;
        el.replaceWith(fresh);
      });
    }
    function soon() {
      if (timer) window.clearTimeout(timer);
      timer = window.setTimeout(refresh, 150);
    }
    var es = new EventSource(root.dataset.liveUrl);
    es.addEventListener("change", function (e) {
      var d = JSON.parse(e.data);
      announce("Run " + String(d.status).replace("_", " "));
      soon();
    });
    es.addEventListener("end", function () { es.close(); soon(); });
  }

  // ---- a decision card: locked as soon as it is decided elsewhere -------------------------------
  function card(region) {
    var es = new EventSource(region.dataset.liveUrl);
    async function refresh(final) {
      var doc = await fetchPage(window.location.pathname);
      if (!doc) return;
      var fresh = doc.getElementById("card-region");
      if (!fresh) return;
      var state = fresh.querySelector("[data-state]");
      if (!final && state && state.dataset.state === "open") { // keep what the person typed: only
        votes(fresh);                                           // the rules line and where they stand
        return;
      }
      var current = document.getElementById("card-region");
      if (current) current.replaceWith(fresh);
      enhance(fresh);
      var outcome = fresh.querySelector("[data-outcome] .outcome-title");
      if (outcome) announce(outcome.textContent.trim());
      if (fresh.hasAttribute("data-live-card") && !final) {
        es.close();
        card(fresh);
      }
    }
    function votes(fresh) {
      var now = document.querySelector("#card-region [data-rules]");
      var line = fresh.querySelector("[data-rules]");
      if (now && line) {
        if (now.textContent !== line.textContent) announce(line.textContent.trim());
        now.replaceWith(line);
      } else if (line) {
        var prompt = document.querySelector("#card-region .prompt");
        if (prompt) prompt.after(line);
      }
      // the person voted elsewhere (another tab, a link): no buttons again, as the page would say
      var stand = fresh.querySelector(".card-actions [data-voted], .card-actions [data-may-not]");
      var actions = document.querySelector("#card-region .card-actions");
      var freshActions = fresh.querySelector(".card-actions");
      if (stand && actions && freshActions && !actions.querySelector("[data-voted], [data-may-not]")) {
        actions.replaceWith(freshActions);
      }
    }
    es.addEventListener("change", function () { refresh(false); });
    es.addEventListener("closed", function () { es.close(); refresh(true); });
  }

  // ---- a tool call's arguments: once one differs from the proposal, the primary action is
  // "Approve edited call" with the change shown old -> new, and plain Approve is gone (the server
  // refuses a plain Approve with changed arguments anyway: this only shows it before sending) -----
  function toolForm(form) {
    var inputs = Array.prototype.slice.call(form.querySelectorAll("[data-original]"));
    var actions = form.querySelector("[data-tool-actions]");
    var approve = form.querySelector("[data-plain-approve]");
    var edit = form.querySelector("[data-edit-approve]");
    var discard = form.querySelector("[data-discard]");
    var box = form.querySelector("[data-arg-diff]");
    var list = form.querySelector("[data-diff-list]");
    if (!approve || !edit || !actions || !box || !list) return;
    var norm = function (v) { return v.replace(/\r\n/g, "\n"); };
    var was = false;
    function update() {
      var changed = inputs.filter(function (el) { return norm(el.value) !== norm(el.dataset.original); });
      list.textContent = "";
      changed.forEach(function (el) {
        var row = document.createElement("div");
        var dt = document.createElement("dt");
        dt.textContent = el.dataset.arg;
        var dd = document.createElement("dd");
        var del = document.createElement("del");
        del.textContent = el.dataset.original;
        var arrow = document.createElement("span");
        arrow.setAttribute("aria-hidden", "true");
        arrow.textContent = " → ";
        var said = document.createElement("span");
        said.className = "visually-hidden";
        said.textContent = " changed to ";
        var ins = document.createElement("ins");
        ins.textContent = norm(el.value);
        dd.append(del, arrow, said, ins);
        row.append(dt, dd);
        list.append(row);
      });
      var now = changed.length > 0;
      box.hidden = !now;
      approve.hidden = now;
      approve.disabled = now;
      approve.classList.toggle("btn-primary", !now);
      if (discard) discard.hidden = !now;
      edit.hidden = !now;
      edit.classList.toggle("btn-primary", now);
      edit.classList.toggle("btn-secondary", !now);
      if (now) actions.prepend(edit); else actions.prepend(approve);
      if (now !== was) announce(now ? "Arguments changed: the primary action is now Approve edited call" : "Arguments as proposed");
      was = now;
    }
    inputs.forEach(function (el) { el.addEventListener("input", update); });
    if (discard) discard.addEventListener("click", function (e) {
      e.preventDefault();
      inputs.forEach(function (el) { el.value = el.dataset.original; });
      update();
      if (inputs[0]) inputs[0].focus();
    });
    update();
  }

  // ---- a values card: the decision first, then only its fields ----------------------------------
  function chooseForm(form) {
    var radios = Array.prototype.slice.call(form.querySelectorAll("input[name=action_id]"));
    var sections = Array.prototype.slice.call(form.querySelectorAll("[data-option]"));
    var submit = form.querySelector("[data-choose-submit]");
    form.noValidate = false; // with the others' fields disabled, the browser checks the chosen one's
    form.classList.add("is-enhanced");
    function update() {
      var picked = radios.find(function (r) { return r.checked; });
      sections.forEach(function (sec) {
        var mine = !!picked && sec.dataset.option === picked.value;
        sec.hidden = !mine;
        sec.disabled = !mine;
      });
      if (submit) {
        var label = picked && form.querySelector("label[for='" + picked.id + "']");
        submit.textContent = label ? label.textContent.trim() : "Send decision";
      }
    }
    radios.forEach(function (r) { r.addEventListener("change", update); });
    update();
  }

  // ---- times: the server writes every time as "2026-12-03 14:05 UTC · in 2 h" in a
  // <time datetime="ISO-UTC" data-when> (api/pages/formatting.py: when); here it is rewritten in
  // the browser's own time zone with the same relative hint, kept fresh every 30 s ---------------
  function relTime(ms) {
    var span = Math.abs(ms) / 1000;
    if (span < 45) return "just now";
    var minutes = Math.round(span / 60), amount;
    if (minutes < 60) amount = minutes + " min";
    else if (minutes < 48 * 60) amount = Math.round(minutes / 60) + " h";
    else amount = Math.round(minutes / 1440) + " d";
    return ms > 0 ? "in " + amount : amount + " ago";
  }
  var zoneFormat = null;
  function localStamp(date) {
    if (!zoneFormat) {
      try {
        zoneFormat = new Intl.DateTimeFormat("en-GB", {year: "numeric", month: "2-digit", day: "2-digit",
          hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short"});
      } catch (e) { return null; }
    }
    var p = {};
    zoneFormat.formatToParts(date).forEach(function (x) { p[x.type] = x.value; });
    return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + " " + (p.timeZoneName || "");
  }
  function localTimes(root) {
    (root || document).querySelectorAll("time[data-when]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (isNaN(at)) return;
      var stamp = localStamp(new Date(at));
      var text = stamp && stamp.trim() + " · " + relTime(at - Date.now());
      if (text && t.textContent !== text) t.textContent = text; // unchanged: no mutation, no loop
    });
  }
  var tick = function () { localTimes(document); };

  // ---- a quick action from the list: held here for 5 s with an Undo, then sent (without this
  // script it is sent at once). Nothing already sent is ever "undone": Undo only cancels a send
  // that has not happened; leaving the page sends what is held. -------------------------------------
  var HOLD_MS = 5000;
  var held = null; // {form, action, label, row, timer}
  var undoBar = function () { return document.querySelector("[data-undo-bar]"); };

  function hideUndo() { var bar = undoBar(); if (bar) bar.hidden = true; }

  function sendHeld(q, leaving) {
    if (held === q) held = null;
    window.clearTimeout(q.timer);
    hideUndo();
    var body = new URLSearchParams(new FormData(q.form));
    body.set("action_id", q.action);
    var sent = fetch(q.form.action, { method: "POST", body: body, credentials: "same-origin", redirect: "manual",
                                     keepalive: !!leaving });
    if (leaving) return;
    sent.then(function (r) {
      if (r.type === "opaqueredirect" || (r.status >= 300 && r.status < 400) || r.redirected) {
        q.row.remove();
        announce(q.label + " sent");
      } else {
        q.row.hidden = false;
        q.row.classList.add("is-refused");
        announce(q.label + " was not applied: open the request to see why");
      }
    }, function () {
      q.row.hidden = false;
      announce(q.label + " was not sent (no connection)");
    });
  }

  function holdQuick(form, submitter) {
    var row = form.closest("li.req");
    if (!row || !window.fetch) return false;
    if (held) sendHeld(held); // one held at a time: the earlier goes now
    var title = row.querySelector(".req-title");
    var label = submitter ? submitter.textContent.trim() : "Decision";
    var next = row.nextElementSibling;
    while (next && next.hidden) next = next.nextElementSibling;
    var q = { form: form, action: submitter ? submitter.value : "", label: label, row: row };
    q.timer = window.setTimeout(function () { sendHeld(q); }, HOLD_MS);
    held = q;
    row.hidden = true;
    var bar = undoBar();
    if (bar) {
      bar.querySelector("[data-undo-text]").textContent = label + ": " + (title ? title.textContent.trim() : "") +
        " (sent in 5 s)";
      bar.hidden = false;
    }
    announce(label + " in 5 seconds. Undo with the Undo button or u.");
    if (next) select(next); else { var main = document.getElementById("main"); if (main) main.focus(); }
    return true;
  }

  function undo() {
    if (!held) return;
    var q = held;
    held = null;
    window.clearTimeout(q.timer);
    hideUndo();
    q.row.hidden = false;
    select(q.row);
    announce(q.label + " undone: nothing was sent");
  }
  document.addEventListener("click", function (e) {
    if (e.target.closest && e.target.closest("[data-undo]")) undo();
  });
  window.addEventListener("pagehide", function () { if (held) sendHeld(held, true); });

  // ---- keyboard: j/k through the inbox's rows, o opens, a/r/e on a card, ? for help -------------
  function inboxRows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-live-inbox] > li.req, [data-waiting-others] > li.req"))
      .filter(function (li) { return !li.hidden; });
  }
  function current() {
    var rows = inboxRows();
    return rows.find(function (li) { return li.classList.contains("is-current"); }) ||
      rows.find(function (li) { return li.contains(document.activeElement); });
  }
  function select(li) {
    inboxRows().forEach(function (r) { r.classList.remove("is-current"); });
    if (!li) return;
    li.classList.add("is-current");
    var link = li.querySelector(".req-title a");
    if (link) link.focus();
    if (li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    var rows = inboxRows();
    if (!rows.length) return;
    var i = rows.indexOf(current());
    select(rows[i < 0 ? 0 : Math.max(0, Math.min(rows.length - 1, i + step))]);
  }
  function visible(el) { return el && !el.hidden && !el.disabled && el.offsetParent !== null; }
  function optionButton(root, which) {
    var buttons = Array.prototype.slice.call(root.querySelectorAll("button[name=action_id]")).filter(visible);
    var words = which === "approve" ? /approv|accept|allow|yes/i : /reject|deny|decline|no\b/i;
    return buttons.find(function (b) { return b.value === which; }) ||
      buttons.find(function (b) { return words.test(b.value + " " + b.textContent); });
  }
  function decideKey(which) {
    var row = current();
    if (row) { // a quick action on the selected row
      var quick = row.querySelector("form[data-quick]");
      var b = quick && optionButton(quick, which);
      if (b) b.click();
      return;
    }
    var cardEl = document.querySelector("[data-live-card] article.is-open");
    if (!cardEl) return;
    if (which === "approve") {
      var edited = cardEl.querySelector("[data-edit-approve].btn-primary");
      var target = (edited && visible(edited)) ? edited : optionButton(cardEl, "approve");
      if (target) { target.focus(); target.click(); return; }
      var radio = cardEl.querySelector("input[name=action_id][value=approve]");
      if (radio) { radio.click(); radio.focus(); }
      return;
    }
    var reject = optionButton(cardEl, "reject");
    if (reject) { reject.focus(); reject.click(); return; }
    var rradio = cardEl.querySelector("input[name=action_id][value=reject]");
    if (rradio) { rradio.click(); rradio.focus(); }
  }
  function editKey() {
    var cardEl = document.querySelector("[data-live-card] article.is-open");
    if (!cardEl) return false;
    var field = Array.prototype.slice.call(cardEl.querySelectorAll(
      "form.decide textarea:not([readonly]), form.decide input:not([type=hidden]):not([readonly]), form.decide select"))
      .filter(visible)[0];
    if (field) { field.focus(); return true; }
    return false;
  }
  function typing(el) {
    if (!el) return false;
    var tag = el.tagName;
    return el.isContentEditable || tag === "TEXTAREA" || tag === "SELECT" ||
      (tag === "INPUT" && !/^(checkbox|radio|button|submit|reset)$/i.test(el.type));
  }
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    var help = document.getElementById("shortcuts");
    if (help && help.open) return;
    var key = e.key;
    if (key === "?") { if (help && help.showModal) { help.showModal(); e.preventDefault(); } return; }
    if (key === "u" && held) { undo(); e.preventDefault(); return; }
    var inInbox = !!document.querySelector("[data-live-inbox]");
    if (inInbox && (key === "j" || key === "k")) { move(key === "j" ? 1 : -1); e.preventDefault(); return; }
    if (inInbox && key === "o") {
      var row = current() || inboxRows()[0];
      var link = row && row.querySelector(".req-title a");
      if (link) { try { window.sessionStorage.setItem("signoff-keys", "1"); } catch (err) { /* private mode */ } link.click(); }
      e.preventDefault();
      return;
    }
    if (key === "a" || key === "r") { decideKey(key === "a" ? "approve" : "reject"); e.preventDefault(); return; }
    if (key === "e" && editKey()) e.preventDefault();
  });

  // an open card reached from the keyboard (o) or after a decision: focus on its primary action
  function focusPrimary() {
    var arrived = /[?&]decided=/.test(window.location.search);
    try { arrived = arrived || window.sessionStorage.getItem("signoff-keys") === "1"; window.sessionStorage.removeItem("signoff-keys"); }
    catch (err) { /* private mode */ }
    if (!arrived) return;
    var primary = Array.prototype.slice.call(document.querySelectorAll("[data-live-card] article.is-open .card-actions .btn-primary"))
      .filter(visible)[0];
    if (primary) primary.focus();
  }

  // ---- a form is sent once ------------------------------------------------------------------------
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.hasAttribute("data-quick") && !e.defaultPrevented && holdQuick(form, e.submitter)) {
      e.preventDefault();
      return;
    }
    if (form.method.toLowerCase() !== "post") return;
    if (form.dataset.busy) { e.preventDefault(); return; }
    form.dataset.busy = "1";
    form.classList.add("is-busy");
  });
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("form[data-busy]").forEach(function (f) { delete f.dataset.busy; f.classList.remove("is-busy"); });
  });

  function start() {
    var list = document.querySelector("[data-live-inbox]");
    if (list && window.EventSource) inbox(list);
    var pill = document.querySelector("[data-inbox-count]");
    if (pill && !list && window.EventSource) headerCount();
    var runRoot = document.querySelector("[data-live-run]");
    if (runRoot && window.EventSource) run(runRoot);
    var region = document.querySelector("[data-live-card]");
    if (region && window.EventSource) card(region);
    localTimes(document);
    window.setInterval(tick, 30000);
    // rows, cards and regions a live stream swaps in carry server-written times too
    if (window.MutationObserver) {
      var pending = false;
      new MutationObserver(function () {
        if (pending) return;
        pending = true;
        window.setTimeout(function () { pending = false; localTimes(document); }, 0);
      }).observe(document.body, {childList: true, subtree: true});
    }
    enhance(document);
    focusPrimary();
  }
  function enhance(root) {
    root.querySelectorAll("form[data-tool-form]").forEach(toolForm);
    root.querySelectorAll("form[data-choose]").forEach(chooseForm);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
