/**
 * Wake-ups for an idle `work()`: producers' transactions send
 * `pg_notify(<schema>, '<queue>:sent:<txid>')` and the ticker
 * `'<queue>:tick:<tick id>'` (Postgres delivers them at commit and folds
 * identical ones of one transaction), and a worker on a driver that can
 * LISTEN wakes at once instead of sleeping out its poll back-off. Which
 * worker of the process a notification wakes is the herd's choice (herd.ts):
 * one, not all.
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
import { join } from "./herd.ts";

/** How long a waker waits for its own probe notification. */
export const PROBE_MS = 2_000;

/** What ended a wait: nothing (false), a tick, producers' commits, or more to read (herd.ts's Call). */
export type Heard = false | "tick" | "sent" | "more";

/** Sleeps of an idle worker, cut short by a notification for its queue. */
export interface Waker {
  /** `listen` once the probe arrived; `poll` before, and for good when it did not. */
  readonly mode: WakeMode;
  /**
   * Resolves after `ms` or on abort (false), or when the herd (herd.ts)
   * calls this worker: `"tick"` when a tick made a window readable,
   * `"sent"` when only producers committed (their events need a tick first).
   * What was called while the worker ran is returned at once.
   */
  wait(ms: number, signal?: AbortSignal): Promise<Heard>;
  /** A run starts: the ticks heard so far are read by it. */
  running(): void;
  /**
   * A tick statement is about to be sent (a run's start, or a tick after
   * commits were heard); call the function it returns with the id of the
   * tick written (or null) and whether another session held the ticker. A
   * tick statement covers the commits heard before it, unless it was busy;
   * its tick's notification wakes nobody of this worker's consumer, and the
   * other consumers of the queue in this process are woken at once.
   */
  ticking(): (id: string | null, busy: boolean) => void;
  /** This worker's batch received events: one more idle worker of its consumer may look. */
  more(): void;
  /** This worker's batch holds all of its consumer's work until the function it returns is called (herd.ts Member.cover). */
  cover(): (wake?: boolean) => void;
  /** Ticks of the queue heard or written by this process so far (herd.ts Member.epoch); 0 while polling. */
  epoch(): number;
  /** Stops listening. */
  close(): Promise<void>;
}

/** A waker that only sleeps. */
export function pollWaker(): Waker {
  return {
    mode: "poll",
    wait: (ms, signal) => sleep(ms, signal).then(() => false as const),
    running: () => {},
    ticking: () => () => {},
    more: () => {},
    cover: () => () => {},
    epoch: () => 0,
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
 * A waker for `consumer` of `queue` on `driver` (channel: the schema name).
 * `onMode` hears the mode once it is known, with the reason.
 */
export function waker(
  driver: Driver,
  channel: string,
  queue: string,
  consumer: string,
  onMode: (mode: WakeMode, reason: string) => void,
  probeMs: number = PROBE_MS,
): Waker {
  if (!driver.listen) {
    onMode("poll", `the ${driver.name} driver cannot LISTEN`);
    return pollWaker();
  }
  // Producers send "<queue>:sent:<txid>", the ticker "<queue>:tick:<tick id>" (queue names hold no ':').
  const tickPayload = `${queue}:tick`;
  const sentPayload = `${queue}:sent:`;
  const token = `keyq-probe:${Math.random().toString(36).slice(2)}:${Date.now()}`;
  const member = join(channel, queue, consumer);
  let mode: WakeMode = "poll";
  let closed = false;
  let probeTimer: ReturnType<typeof setTimeout> | undefined;
  const onNotify = (payload: string) => {
    if (closed) return;
    if (payload === token) {
      if (mode === "poll") {
        clearTimeout(probeTimer);
        mode = "listen";
        onMode("listen", "a probe notification arrived");
      }
    } else if (payload === queue) member.heard("sent", null); // an engine before 0.2: no transaction id
    else if (payload.startsWith(sentPayload)) member.heard("sent", payload.slice(sentPayload.length));
    else if (payload === tickPayload) member.heard("tick", null);
    else if (payload.startsWith(`${tickPayload}:`)) member.heard("tick", payload.slice(tickPayload.length + 1));
  };
  const unlisten = driver.listen(channel, onNotify).then(
    async (stop) => {
      if (closed) return stop;
      probeTimer = setTimeout(() => {
        if (mode === "poll") {
          closed = true;
          member.leave();
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
      closed = true;
      member.leave();
      onMode("poll", `LISTEN failed: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    },
  );
  return {
    get mode() {
      return mode;
    },
    async wait(ms, signal) {
      const pending = closed ? false : member.take();
      if (pending) return pending;
      let called: Heard = false;
      await sleep(ms, signal, (end) => {
        if (!closed) member.idle((call) => ((called = call), end()));
      });
      member.busy();
      return called;
    },
    running: () => member.running(),
    ticking: () => member.ticking(),
    more: () => member.more(),
    cover: () => (closed ? () => {} : member.cover()),
    epoch: () => member.epoch(),
    async close() {
      if (!closed) member.leave();
      closed = true;
      clearTimeout(probeTimer);
      const stop = await unlisten;
      await stop?.().catch(() => {});
    },
  };
}
