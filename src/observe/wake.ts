/**
 * Wake-ups for an idle `work()`: producers' transactions and the ticker send
 * `pg_notify(<schema>, <queue>)` (Postgres delivers it at commit and folds
 * identical ones of one transaction), and a worker on a driver that can
 * LISTEN wakes at once instead of sleeping out its poll back-off.
 *
 * Whether notifications really arrive is probed, not configured: the waker
 * LISTENs, sends itself a notification through the ordinary query path and
 * switches to `listen` only when it hears it. Behind a transaction pooler,
 * on HTTP drivers and in `run()` the worker keeps polling. Until then, and
 * always as a backstop, the poll back-off runs: correctness never depends on
 * a notification.
 *
 * @module
 */

import type { Driver } from "../driver.ts";
import type { WakeMode } from "./observer.ts";

/** How long a waker waits for its own probe notification. */
export const PROBE_MS = 2_000;

/** What ended a wait: nothing (false), a tick, or producers' commits. */
export type Heard = false | "tick" | "sent";

/** Sleeps of an idle worker, cut short by a notification for its queue. */
export interface Waker {
  /** `listen` once the probe arrived; `poll` before, and for good when it did not. */
  readonly mode: WakeMode;
  /**
   * Resolves after `ms` or on abort (false), or at the first notification
   * since the last wait or run: `"tick"` when a tick made a window readable,
   * `"sent"` when only producers committed (their events need a tick first).
   */
  wait(ms: number, signal?: AbortSignal): Promise<Heard>;
  /**
   * A run starts: notifications heard so far are for commits it will see
   * (or for a tick another worker is writing, whose own notification
   * follows), so they need not wake the worker again.
   */
  running(): void;
  /**
   * This worker wrote tick `id` itself and reads it now: that tick's
   * notification (heard already, or still to come) wakes nobody here.
   */
  own(id: string): void;
  /** Stops listening. */
  close(): Promise<void>;
}

/** A waker that only sleeps. */
export function pollWaker(): Waker {
  return {
    mode: "poll",
    wait: (ms, signal) => sleep(ms, signal).then(() => false as const),
    running: () => {},
    own: () => {},
    close: async () => {},
  };
}

/**
 * Sleeps `ms`, waking early when `signal` aborts or when the function handed
 * to `wake` is called (a notification cuts an idle sleep short).
 *
 * @example
 * ```ts
 * const ctl = new AbortController();
 * setTimeout(() => ctl.abort(), 10);
 * await sleep(60_000, ctl.signal); // returns after about 10 ms
 * ```
 */
export function sleep(ms: number, signal?: AbortSignal, wake?: (f: () => void) => void): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    wake?.(done);
  });
}

/**
 * A waker for `queue` on `driver` (channel: the schema name). `onMode` hears
 * the mode once it is known, with the reason.
 */
export function waker(driver: Driver, channel: string, queue: string, onMode: (mode: WakeMode, reason: string) => void, probeMs: number = PROBE_MS): Waker {
  if (!driver.listen) {
    onMode("poll", `the ${driver.name} driver cannot LISTEN`);
    return pollWaker();
  }
  // The ticker sends "<queue>:tick:<tick id>" (queue names hold no ':').
  const tickPayload = `${queue}:tick`;
  const token = `keyq-probe:${Math.random().toString(36).slice(2)}:${Date.now()}`;
  let mode: WakeMode = "poll";
  let sent = false;
  // Ticks heard and not yet acted on, and this worker's own ticks whose
  // notification has not arrived (bounded: one that never comes is forgotten).
  const ticks = new Set<string>();
  const mine = new Set<string>();
  let wakeNow: (() => void) | undefined;
  let closed = false;
  let probeTimer: ReturnType<typeof setTimeout> | undefined;
  const onNotify = (payload: string) => {
    if (payload === token) {
      if (mode === "poll" && !closed) {
        clearTimeout(probeTimer);
        mode = "listen";
        onMode("listen", "a probe notification arrived");
      }
      return;
    }
    if (payload === queue) sent = true;
    else if (payload === tickPayload || payload.startsWith(`${tickPayload}:`)) {
      const id = payload.slice(tickPayload.length + 1);
      if (mine.delete(id)) return; // this worker's own tick: it is reading it
      ticks.add(id);
    } else return;
    wakeNow?.();
  };
  const unlisten = driver.listen(channel, onNotify).then(
    async (stop) => {
      if (closed) return stop;
      probeTimer = setTimeout(() => {
        if (mode === "poll") {
          closed = true;
          onMode("poll", `no notification arrived within ${probeMs} ms (a transaction pooler?)`);
          stop().catch(() => {});
        }
      }, probeMs);
      // Sent only from a session that does not itself listen: a transaction
      // pooler may hand the listening server connection to this very query,
      // whose caller would then hear its own probe. A one-connection driver
      // (PGlite, a pg Client) listens and probes on its one session.
      const single = driver.connections === 1 ? "true" : "false";
      await driver.query(
        "select pg_notify($1::text, $2::text) where $3::boolean or not ($1::text = any (array(select pg_listening_channels())))",
        [channel, token, single],
      ).catch(() => {});
      return stop;
    },
    (err: unknown) => {
      onMode("poll", `LISTEN failed: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    },
  );
  return {
    get mode() {
      return mode;
    },
    async wait(ms, signal) {
      if (!sent && ticks.size === 0) {
        await sleep(ms, signal, (f) => (wakeNow = f));
        wakeNow = undefined;
      }
      const heard: Heard = ticks.size > 0 ? "tick" : sent ? "sent" : false;
      sent = false;
      ticks.clear();
      return heard;
    },
    running() {
      sent = false;
      ticks.clear();
    },
    own(id) {
      if (ticks.delete(id)) return;
      mine.add(id);
      if (mine.size > 64) mine.delete(mine.values().next().value!);
    },
    async close() {
      closed = true;
      clearTimeout(probeTimer);
      const stop = await unlisten;
      await stop?.().catch(() => {});
    },
  };
}
