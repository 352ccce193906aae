// Helpers shared by the SDK's unit tests: a bounded wait on a condition, and timers fired by
// hand.

/** Resolves once pred() holds, polling every 2 ms; rejects after timeout ms. */
export async function until(what, pred, timeout = 3000) {
  const deadline = Date.now() + timeout;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Timers held until fire(): the delays the client asked for are in delays(). */
export function manualTimers() {
  const pending = new Map();
  let n = 0;
  return {
    set(f, ms) { pending.set(++n, { f, ms }); return n; },
    clear(id) { pending.delete(id); },
    delays() { return [...pending.values()].map((t) => t.ms); },
    fire() {
      const all = [...pending.values()];
      pending.clear();
      for (const t of all) t.f();
      return all.length;
    },
  };
}
