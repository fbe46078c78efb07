/**
 * What `keyq status`, `queues`, `create-queue` and `maintain` print, and the
 * alert thresholds of `keyq status --check`. Pure functions over the
 * client's reports, so they are tested without a database.
 *
 * @module
 */
import type { MaintainReport, QueueInfo, QueueStatus } from "../mod.ts";
import { QUEUE_SETTINGS } from "../src/ops/queue-settings.ts";
import { humanSeconds } from "./format.ts";

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

/** One row per queue, in a stable column order. */
export function queueRows(status: QueueStatus[]): Record<string, unknown>[] {
  return status.map((s) => ({
    queue: s.queue,
    "last tick": s.lastTick ?? "never",
    "tick age": humanSeconds(s.lastTickAge),
    "not ticked": s.eventsSinceTick,
    // The same values as --json: ring tables are numbered from 0.
    "current table": s.currentTable,
    tables: s.tables,
    retention: s.retention === null ? "none" : humanSeconds(s.retention),
    "retained since": s.retained?.since ?? "",
    "retained events": s.retained?.events ?? "",
    "retained bytes": s.retained?.bytes ?? "",
    "oldest event": s.retained?.oldestEventId ?? "",
    consumers: s.consumers.length,
  }));
}

/** One row per cursor (per slot for ordered consumers). */
export function cursorRows(status: QueueStatus[]): Record<string, unknown>[] {
  return status.flatMap((s) =>
    s.consumers.flatMap((c) =>
      c.cursors.map((cu) => ({
        queue: s.queue,
        consumer: c.name,
        kind: c.kind,
        paused: c.paused ? "PAUSED" : "",
        slot: c.kind === "ordered" ? cu.slot : "",
        "lag events": cu.lagEvents,
        "lag": humanSeconds(cu.lagSeconds),
        "polled": `${humanSeconds(cu.polledAgo)} ago`,
        stale: cu.stale ? "STALE" : "",
        retries: c.retries,
        dead: c.deadLetters,
        blocked: c.blockedKeys,
      }))
    )
  );
}

/** A queue's settings with durations in human units, in the order of the settings table (src/ops/queue-settings.ts). */
export function queueSettings(q: QueueInfo): Record<string, unknown> {
  const out: Record<string, unknown> = { name: q.name };
  for (const [k, spec] of Object.entries(QUEUE_SETTINGS)) {
    const value = (q as unknown as Record<string, number>)[k];
    out[k.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`)] = k === "retention" && value === null
      ? "none"
      : spec.kind === "duration"
      ? humanSeconds(value)
      : value;
    // The same value as --json: ring tables are numbered from 0.
    if (k === "tables") out["current table"] = q.currentTable;
  }
  out["created at"] = q.createdAt;
  return out;
}

/** One row per maintained queue. */
export function maintainRows(reports: MaintainReport[]): Record<string, unknown>[] {
  return reports.map((r) => ({
    queue: r.queue,
    skipped: r.skipped ? "yes (another caller is maintaining it)" : "",
    rotated: r.rotation ? (r.rotation.rotated ? `yes, to table ${r.rotation.table ?? 0}` : `no (${r.rotation.reason ?? ""})`) : "",
    "ticks pruned": r.ticksPruned ?? "",
    "dedup keys expired": r.dedupExpired ?? "",
  }));
}
