/**
 * The alert thresholds of `keyq status --check` and of the health handler
 * (health.ts): one check over `status()`, shared by both. Time thresholds
 * are durations (milliseconds or text like `"5m"`), the unit `status()`
 * reports, so a reported `lastTickAgeMs` or `lagMs` passed back as a
 * threshold means the same.
 *
 * @module
 */
import * as v from "valibot";
import type { Duration, QueueStatus } from "../types.ts";
import { duration, durationMs, int, parse } from "../validate.ts";

/**
 * Milliseconds as a human duration: "250 ms", "1.2 s", "5 min", "2.5 h", "3 d".
 *
 * @example
 * ```ts ignore
 * humanMs(90_000); // "1.5 min"
 * ```
 */
export function humanMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "";
  const seconds = ms / 1000;
  const round = (n: number) => String(Number(n.toFixed(n < 10 ? 1 : 0)));
  if (seconds < 1) return `${Math.round(ms)} ms`;
  if (seconds < 60) return `${round(seconds)} s`;
  if (seconds < 3600) return `${round(seconds / 60)} min`;
  if (seconds < 86400) return `${round(seconds / 3600)} h`;
  return `${round(seconds / 86400)} d`;
}

/** Thresholds of `status --check`; a missing one is not checked. */
export interface Thresholds {
  /** Longest time since the queue's last tick (nobody is running the queue): milliseconds or text like `"5m"`; compared with `lastTickAgeMs`. */
  maxTickAgeMs?: Duration;
  /** Events a cursor may be behind; compared with `lagEvents`. */
  maxLag?: number;
  /** Longest time a cursor may be behind: milliseconds or text like `"1m"`; compared with `lagMs`. */
  maxLagMs?: Duration;
  /** Dead letters per consumer. */
  maxDead?: number;
  /** Blocked keys per consumer (Tier B pause). */
  maxBlocked?: number;
  /** Alert on cursors nobody polled for `staleAfter` (they pin rotation). */
  stale?: boolean;
}

/** The thresholds `--check` uses when no flag overrides them: a tick at most 5 minutes old, no dead letter, no blocked key, no stale cursor. */
export const DEFAULT_THRESHOLDS: Thresholds = { maxTickAgeMs: 300_000, maxDead: 0, maxBlocked: 0, stale: true };

const count = int(0, Number.MAX_SAFE_INTEGER);
const thresholdSchema = v.strictObject({
  maxTickAgeMs: v.optional(duration),
  maxLag: v.optional(count),
  maxLagMs: v.optional(duration),
  maxDead: v.optional(count),
  maxBlocked: v.optional(count),
  stale: v.optional(v.boolean("expected true or false")),
});

/** Checked thresholds, durations in milliseconds. */
type Limits = Omit<Thresholds, "maxTickAgeMs" | "maxLagMs"> & { maxTickAgeMs?: number; maxLagMs?: number };

/**
 * Checks thresholds and reads their durations as milliseconds; an unknown
 * name (such as the former `maxTickAge`, in seconds) is an `INVALID_INPUT`
 * naming the right one, never a threshold silently left unchecked.
 *
 * @example
 * ```ts ignore
 * checkThresholds({ maxTickAgeMs: "5m" }).maxTickAgeMs; // 300000
 * checkThresholds({ maxTickAge: 300 }); // INVALID_INPUT: did you mean "maxTickAgeMs"?
 * ```
 */
export function checkThresholds(t: unknown): Limits {
  const o = parse(thresholdSchema, t, "thresholds");
  return { ...o, maxTickAgeMs: durationMs("maxTickAgeMs", o.maxTickAgeMs), maxLagMs: durationMs("maxLagMs", o.maxLagMs) };
}

/**
 * Every crossed threshold as one line naming the queue, consumer and slot;
 * empty when all is well.
 *
 * @example
 * ```ts
 * import { checkStatus } from "@keyq/keyq";
 * declare const q: import("@keyq/keyq").Keyq;
 * const problems = checkStatus(await q.status(), { maxTickAgeMs: "5m", maxLagMs: 60_000, maxDead: 0 });
 * if (problems.length) console.error(problems.join("\n"));
 * ```
 */
export function checkStatus(status: QueueStatus[], thresholds: Thresholds): string[] {
  const t = checkThresholds(thresholds);
  const problems: string[] = [];
  for (const s of status) {
    if (t.maxTickAgeMs !== undefined && (s.lastTickAgeMs ?? Infinity) > t.maxTickAgeMs) {
      const age = s.lastTickAgeMs === null ? "never" : `${humanMs(s.lastTickAgeMs)} ago`;
      problems.push(`queue ${s.queue}: last tick ${age} (max ${humanMs(t.maxTickAgeMs)})`);
    }
    for (const c of s.consumers) {
      const who = `queue ${s.queue}, consumer ${c.name}`;
      if (t.maxDead !== undefined && c.deadLetters > t.maxDead) problems.push(`${who}: ${c.deadLetters} dead letters (max ${t.maxDead})`);
      if (t.maxBlocked !== undefined && c.blockedKeys > t.maxBlocked) problems.push(`${who}: ${c.blockedKeys} blocked keys (max ${t.maxBlocked})`);
      for (const cu of c.cursors) {
        const where = c.kind === "ordered" ? `${who}, slot ${cu.slot}` : who;
        if (t.maxLag !== undefined && cu.lagEvents > t.maxLag) problems.push(`${where}: ${cu.lagEvents} events behind (max ${t.maxLag})`);
        if (t.maxLagMs !== undefined && cu.lagMs > t.maxLagMs) problems.push(`${where}: ${humanMs(cu.lagMs)} behind (max ${humanMs(t.maxLagMs)})`);
        if (t.stale && cu.stale) problems.push(`${where}: stale, not polled for ${humanMs(cu.polledAgoMs)} (it holds back rotation)`);
      }
    }
  }
  return problems;
}
