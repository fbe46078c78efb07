/**
 * The alert thresholds of `keyq status --check` and of the health handler
 * (health.ts): one check over `status()`, shared by both.
 *
 * @module
 */
import type { QueueStatus } from "../types.ts";

/** Seconds as a human duration: "250 ms", "1.2 s", "5 min", "2.5 h", "3 d". */
export function humanSeconds(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "";
  const round = (n: number) => String(Number(n.toFixed(n < 10 ? 1 : 0)));
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${round(seconds)} s`;
  if (seconds < 3600) return `${round(seconds / 60)} min`;
  if (seconds < 86400) return `${round(seconds / 3600)} h`;
  return `${round(seconds / 86400)} d`;
}

/** Thresholds of `status --check`; a missing one is not checked. */
export interface Thresholds {
  /** Seconds since the queue's last tick (nobody is running the queue). */
  maxTickAge?: number;
  /** Events a cursor is behind. */
  maxLag?: number;
  /** Seconds a cursor is behind. */
  maxLagAge?: number;
  /** Dead letters per consumer. */
  maxDead?: number;
  /** Blocked keys per consumer (Tier B pause). */
  maxBlocked?: number;
  /** Alert on cursors nobody polled for `staleAfter` (they pin rotation). */
  stale?: boolean;
}

/** The thresholds `--check` uses when no flag overrides them. */
export const DEFAULT_THRESHOLDS: Thresholds = { maxTickAge: 300, maxDead: 0, maxBlocked: 0, stale: true };

/** Every crossed threshold as one line naming the queue, consumer and slot; empty when all is well. */
export function checkStatus(status: QueueStatus[], t: Thresholds): string[] {
  const problems: string[] = [];
  for (const s of status) {
    if (t.maxTickAge !== undefined && (s.lastTickAge ?? Infinity) > t.maxTickAge) {
      problems.push(`queue ${s.queue}: last tick ${s.lastTickAge === null ? "never" : `${humanSeconds(s.lastTickAge)} ago`} (max ${humanSeconds(t.maxTickAge)})`);
    }
    for (const c of s.consumers) {
      const who = `queue ${s.queue}, consumer ${c.name}`;
      if (t.maxDead !== undefined && c.deadLetters > t.maxDead) problems.push(`${who}: ${c.deadLetters} dead letters (max ${t.maxDead})`);
      if (t.maxBlocked !== undefined && c.blockedKeys > t.maxBlocked) problems.push(`${who}: ${c.blockedKeys} blocked keys (max ${t.maxBlocked})`);
      for (const cu of c.cursors) {
        const where = c.kind === "ordered" ? `${who}, slot ${cu.slot}` : who;
        if (t.maxLag !== undefined && cu.lagEvents > t.maxLag) problems.push(`${where}: ${cu.lagEvents} events behind (max ${t.maxLag})`);
        if (t.maxLagAge !== undefined && cu.lagSeconds > t.maxLagAge) {
          problems.push(`${where}: ${humanSeconds(cu.lagSeconds)} behind (max ${humanSeconds(t.maxLagAge)})`);
        }
        if (t.stale && cu.stale) problems.push(`${where}: stale, not polled for ${humanSeconds(cu.polledAgo)} (it holds back rotation)`);
      }
    }
  }
  return problems;
}

