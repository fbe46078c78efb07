/**
 * The run and work loops shared by every consumer kind.
 *
 * @module
 */

import type { BatchSettings } from "../batch/settings.ts";
import { KeyqError } from "../errors.ts";
import { backoffMs, classify } from "../faults.ts";
import type { BatchReport, RunReport } from "../types.ts";
import { pollWaker, sleep, type Waker } from "../observe/wake.ts";
import type { Ticked } from "../batch/batch.ts";

/** An empty report to add batches to. */
export function emptyReport(): RunReport {
  return { batches: 0, events: 0, retried: 0, deadLettered: 0, dropped: 0, deferred: 0, statements: 0, roundTrips: 0, ticked: false, ms: 0 };
}

/** Adds one batch (or run) report into `total`. */
export function addUp(total: RunReport, b: Omit<BatchReport, "busy"> & { batches?: number; ticked?: boolean }): void {
  total.batches += b.batches ?? 1;
  total.events += b.events;
  total.retried += b.retried;
  total.deadLettered += b.deadLettered;
  total.dropped += b.dropped;
  total.deferred += b.deferred;
  total.statements += b.statements;
  total.roundTrips = total.statements;
  total.ticked ||= b.ticked ?? false;
}

/** True for the rejection of a batch that the worker's own signal stopped. */
function stoppedBy(err: unknown, s: BatchSettings): boolean {
  return s.signal?.aborted === true && err instanceof KeyqError && err.code === "BATCH_ABORTED" && err.details.reason === "stopped";
}

/** A batch of a chained run: its predecessor, committing, and the hook it calls when its own COMMIT is held. */
export interface LoopLink {
  readonly previous?: Promise<unknown>;
  held(report: BatchReport): void;
}

/** Adds a batch's report; an empty or busy batch (the run's last) adds only its statements. */
function count(report: RunReport, b: BatchReport): void {
  if (b.busy || b.events + b.dropped + b.deferred + b.retried + b.deadLettered === 0) {
    report.statements += b.statements; // the empty look still cost its statements
    report.roundTrips = report.statements;
  } else addUp(report, b);
}

/** True for a batch that was not full: of a kind whose batch reads up to the newest tick (window_take), it read all there was. */
export const short = (b: BatchReport, s: BatchSettings): boolean => b.events + b.dropped + b.deferred < s.maxEvents;

/** True when a batch's report ends the run (busy, or nothing to do). */
const last = (b: BatchReport): boolean => b.busy || b.events + b.dropped + b.deferred + b.retried + b.deadLettered === 0;

/**
 * One batch: its report as soon as it is known, which in a chained run is
 * when its COMMIT is held (`done` then settles when the COMMIT answers).
 */
async function launch(batch: (until: number, link?: LoopLink) => Promise<BatchReport>, until: number, chained: boolean, previous?: Promise<unknown>) {
  let wake!: (b: BatchReport) => void;
  const held = new Promise<BatchReport>((resolve) => (wake = resolve));
  const done = batch(until, chained ? { previous, held: wake } : undefined);
  done.catch(() => {}); // observed below, or by the next batch and the loop's end
  const first = await Promise.race([done.then((b) => ({ b, committed: true })), held.then((b) => ({ b, committed: false }))]);
  return { ...first, done };
}

/**
 * One run: `start` (subscribe when needed, tick, plan and maintenance: one
 * statement, see 10_start.sql), then batches until the budget,
 * the batch limit, the signal, or a batch that finds nothing to do. Each
 * batch gets the budget's end: it starts no event after it. A fault rejects
 * the run (a cron caller sees it; `work()` retries it).
 *
 * With a `chain` (Driver.chain) the batches share one connection and each
 * COMMIT travels with the next batch's BEGIN and receive: the next batch
 * starts once the previous one's COMMIT is held, and that batch is counted
 * only when its COMMIT answered (the next batch awaits it after its
 * receive, before any handler). The run's last COMMIT goes alone, by
 * `chain.end()`. A failed COMMIT rejects the run with its error.
 */
export async function runLoop(
  s: BatchSettings,
  start: () => Promise<{ ticked: boolean; statements: number }>,
  batch: (until: number, link?: LoopLink) => Promise<BatchReport>,
  chain?: { end(): Promise<void> },
  ends?: (b: BatchReport) => boolean,
): Promise<RunReport> {
  const started = Date.now();
  const report = emptyReport();
  const st = await start();
  report.ticked = st.ticked;
  report.statements += st.statements;
  report.roundTrips = report.statements;
  return await consume(s, started, report, batch, ends, chain);
}

/**
 * Batches until the budget (from `started`), the batch limit, the signal,
 * or a batch that finds nothing to do (or one that `ends` says took the
 * last of what there was), added to `report`; chained as runLoop says when
 * `chain` is given.
 */
export async function consume(
  s: BatchSettings,
  started: number,
  report: RunReport,
  batch: (until: number, link?: LoopLink) => Promise<BatchReport>,
  ends: ((b: BatchReport) => boolean) | undefined,
  chain?: { end(): Promise<void> },
): Promise<RunReport> {
  const until = started + s.budgetMs;
  let committing: Promise<BatchReport> | undefined; // a batch whose COMMIT is held or in flight
  try {
    // A batch whose COMMIT is held counts against maxBatches already (it is never an empty one).
    while (report.batches + (committing ? 1 : 0) < s.maxBatches && Date.now() < until && !s.signal?.aborted) {
      let b: Awaited<ReturnType<typeof launch>>;
      try {
        b = await launch(batch, until, chain !== undefined, committing);
      } catch (err) {
        if (committing) await chain?.end().catch(() => {});
        if (committing) count(report, await committing); // an earlier failure is the run's
        committing = undefined;
        if (stoppedBy(err, s)) break;
        throw err;
      }
      if (committing) count(report, await committing);
      committing = b.committed ? undefined : b.done;
      if (b.committed) count(report, b.b);
      if (last(b.b)) break;
      if (ends?.(b.b)) break;
    }
  } finally {
    if (committing) await chain?.end().catch(() => {});
    else await chain?.end();
  }
  if (committing) count(report, await committing);
  report.ms = Date.now() - started;
  return report;
}

/** What a work loop tells its observers. */
export interface WorkHooks {
  /** Idle sleeps, cut short by a notification (wake.ts); a plain sleep without one. */
  waker?: Waker;
  /** A notification ended an idle wait. */
  woken?(): void;
  /**
   * Ticks (and plans) without reading, telling the waker (Waker.ticking);
   * the id of the tick it wrote, or null. Called when only producers'
   * commits were heard: the worker runs when it ticked itself, else it
   * waits for the tick another worker is writing.
   */
  tick?(): Promise<Ticked>;
  /**
   * The run after a wake-up: `run` less what the wake-up already did (its
   * tick, when `"ticked"`) and less maintenance, which a full run does at
   * least every {@link FULL_RUN_MS}; after `"sent"` it ticks itself, with
   * its first batch's BEGIN ({@link WorkHooks.leads}). Without it every run is full.
   */
  woke?(woke: Exclude<Woke, false>): Promise<RunReport>;
  /**
   * True when the run after producers' commits can send its tick in the
   * same network write as its first batch's BEGIN and receive
   * (Driver.transactionAfter): the idle wait then leaves the tick to that
   * run instead of spending a round trip on it first.
   */
  leads?(): boolean;
  /** A transient fault is retried. */
  retry?(info: { error: unknown; attempt: number; delayMs: number }): void;
}

/**
 * A woken worker's runs skip maintenance (and the tick it just wrote) when
 * its last full run began less than this long ago: at a steady rate every
 * event wakes a run, and each would otherwise spend two statements first.
 */
export const FULL_RUN_MS = 1_000;

/**
 * The loop's clockwork, read at each run: tests that count the statements
 * of a wake-up raise `fullRunMs` so that a slow machine's periodic full run
 * cannot fall inside what they count.
 */
export const loopTuning: { fullRunMs: number } = { fullRunMs: FULL_RUN_MS };

/** The pause before a tick is tried again after another session held the ticker. */
const BUSY_TICK_MS = 2;

/**
 * Why an idle wait ended: the worker ticked itself, heard another's tick,
 * heard producers' commits that its run ticks for (WorkHooks.leads), or
 * none of these (time out, abort).
 */
export type Woke = false | "ticked" | "tick" | "sent";

/**
 * Waits up to `ms` for a reason to run. Producers' commits alone first get
 * a tick (one statement): the worker that wrote it reads at once; the
 * others wait for its notification (or another one's), which follows its
 * commit.
 */
async function idleWait(s: BatchSettings, waker: Waker, hooks: WorkHooks, total: RunReport, ms: number): Promise<Woke> {
  const end = Date.now() + ms;
  for (;;) {
    const heard = await waker.wait(Math.max(0, end - Date.now()), s.signal);
    if (heard === false) return false;
    if (heard === "more") return "ticked"; // a worker of this consumer wrote and planned the tick: read at once
    if (heard === "tick" || !hooks.tick) return "tick";
    if (hooks.leads?.()) return "sent"; // the run ticks with its first batch
    try {
      total.statements++;
      total.roundTrips = total.statements;
      const t = await hooks.tick();
      if (t.tick !== null) return "ticked";
      // Another session was writing a tick whose snapshot may not hold the commits heard: the waker keeps
      // them uncovered, so the next wait ticks again, once that tick's short transaction had time to end.
      if (t.busy) await sleep(BUSY_TICK_MS, s.signal);
    } catch {
      return "tick"; // the run meets the fault and reports it
    }
    if (Date.now() >= end || s.signal?.aborted) return false;
  }
}

/**
 * Loops `run` until the signal aborts, backing off while idle (a waker's
 * notification ends an idle wait at once, and the run it brings is
 * `hooks.woke`'s). Transient
 * failures (see faults.ts) are reported to `onRetry` and retried after a
 * capped, jittered backoff; a permanent one rejects at once.
 */
export async function workLoop(s: BatchSettings, run: () => Promise<RunReport>, hooks: WorkHooks = {}): Promise<RunReport> {
  const waker = hooks.waker ?? pollWaker();
  const total = emptyReport();
  const started = Date.now();
  let wait = s.minPollMs;
  let attempt = 0;
  let woke = false as Woke;
  let lastFull = -Infinity;
  const idle = async (ms: number): Promise<boolean> => {
    woke = await idleWait(s, waker, hooks, total, ms);
    if (woke !== false) hooks.woken?.();
    return woke !== false;
  };
  while (!s.signal?.aborted) {
    let r: RunReport;
    try {
      waker.running();
      const fast = woke !== false && hooks.woke !== undefined && Date.now() - lastFull < loopTuning.fullRunMs;
      if (!fast) lastFull = Date.now();
      r = fast ? await hooks.woke!(woke as Exclude<Woke, false>) : await run();
      woke = false;
      attempt = 0;
    } catch (err) {
      woke = false;
      if (stoppedBy(err, s)) break;
      if (classify(err) === "permanent") throw err;
      if (s.signal?.aborted) break;
      attempt++;
      const delayMs = backoffMs(attempt, s.retryBackoff);
      try {
        s.onRetry?.({ error: err, attempt, delayMs });
      } catch { /* a reporting hook must not stop the worker */ }
      hooks.retry?.({ error: err, attempt, delayMs });
      await sleep(delayMs, s.signal);
      continue;
    }
    addUp(total, r);
    if (r.events + r.dropped + r.deferred > 0) {
      wait = s.minPollMs;
      // Listening, after a run that ended on an empty batch: what commits
      // next notifies, so the next run waits for it (at most minPollMs)
      // instead of looking at once. A run cut short by its budget or batch
      // limit goes on at once.
      const drained = r.batches < s.maxBatches && r.ms < s.budgetMs;
      if (waker.mode === "listen" && drained) await idle(s.minPollMs);
    } else if (await idle(wait)) wait = s.minPollMs;
    else wait = Math.min(wait * 2, s.maxPollMs);
  }
  total.ms = Date.now() - started;
  return total;
}
