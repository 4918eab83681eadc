// rdq console: refresh in place, keyboard shortcuts, selection count. The pages work without it.
"use strict";

(function () {
  const PERIOD_MS = 5000;
  const STORE_KEY = "rdq-live";

  // "/" jumps to the search box (unless the user is typing somewhere).
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    const typing = target instanceof HTMLElement && target.closest("input, textarea, select");
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const search = document.getElementById("q");
      if (search) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    }
  });

  // "N selected" next to the action buttons.
  function countPicked() {
    const note = document.getElementById("picked");
    if (!note) return;
    const picked = document.querySelectorAll('#tasks input[name="ids"]:checked').length;
    note.textContent = picked ? `${picked} selected:` : "Select tasks, then:";
  }
  document.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.name === "ids") countPicked();
  });

  if (!document.body.hasAttribute("data-live-page")) return;

  const toggle = document.getElementById("live-toggle");
  const note = document.getElementById("live-note");
  let live = localStorage.getItem(STORE_KEY) !== "off";
  let busy = false;

  function showState(text) {
    if (toggle) {
      toggle.setAttribute("aria-pressed", String(live));
      toggle.textContent = live ? "Live" : "Paused";
    }
    if (note) note.textContent = text || (live ? "refreshes every 5 s" : "not refreshing");
  }
  showState();
  if (toggle) {
    toggle.addEventListener("click", () => {
      live = !live;
      localStorage.setItem(STORE_KEY, live ? "on" : "off");
      showState();
      if (live) refresh();
    });
  }

  function counts(root) {
    const found = new Map();
    root.querySelectorAll("[data-count]").forEach((el) => {
      const value = parseInt(el.textContent.replace(/[^0-9-]/g, ""), 10);
      if (!Number.isNaN(value)) found.set(el.getAttribute("data-count"), value);
    });
    return found;
  }

  // A region the pointer or the keyboard is in is left alone until it is not: nothing moves
  // under the cursor.
  function inUse(region) {
    return region.matches(":hover") || region.contains(document.activeElement);
  }

  function swap(oldRegion, newRegion) {
    const picked = new Set(
      Array.from(oldRegion.querySelectorAll('input[type="checkbox"]:checked')).map((i) => i.value),
    );
    const open = new Set(
      Array.from(oldRegion.querySelectorAll("details[open]")).map((d, i) => d.id || String(i)),
    );
    const before = counts(oldRegion);
    oldRegion.replaceChildren(...Array.from(newRegion.childNodes));
    oldRegion.querySelectorAll('input[type="checkbox"]').forEach((input) => {
      if (picked.has(input.value)) input.checked = true;
    });
    oldRegion.querySelectorAll("details").forEach((d, i) => {
      if (open.has(d.id || String(i))) d.open = true;
    });
    oldRegion.querySelectorAll("[data-count]").forEach((el) => {
      const key = el.getAttribute("data-count");
      const now = parseInt(el.textContent.replace(/[^0-9-]/g, ""), 10);
      if (!before.has(key) || Number.isNaN(now) || before.get(key) === now) return;
      const change = now - before.get(key);
      const badge = document.createElement("span");
      badge.className = change > 0 ? "delta" : "delta down";
      badge.textContent = (change > 0 ? "+" : "") + change.toLocaleString();
      badge.title = "since the last refresh";
      el.after(badge);
    });
  }

  async function refresh() {
    if (!live || busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch(location.href, {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
        cache: "no-store",
      });
      if (response.redirected && new URL(response.url).pathname === "/ui/login") {
        live = false;
        showState("session ended: reload to log in");
        return;
      }
      if (!response.ok) {
        showState(`refresh failed (HTTP ${response.status}); retrying`);
        return;
      }
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      let held = 0;
      document.querySelectorAll("[data-live][id]").forEach((region) => {
        const next = fresh.getElementById(region.id);
        if (!next || next.innerHTML === region.innerHTML) return;
        if (inUse(region)) {
          held += 1;
          return;
        }
        swap(region, next);
      });
      countPicked();
      const time = new Date().toLocaleTimeString();
      showState(held ? `updated ${time}; the part under the pointer waits` : `updated ${time}`);
    } catch (error) {
      showState("refresh failed; retrying");
    } finally {
      busy = false;
    }
  }

  setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
})();
