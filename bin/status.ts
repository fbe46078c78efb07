/**
 * What `keyq status`, `queues`, `create-queue` and `maintain` print, and the
 * alert thresholds of `keyq status --check`. Pure functions over the
 * client's reports, so they are tested without a database.
 *
 * @module
 */
import type { MaintainReport, QueueInfo, QueueStatus } from "../mod.ts";
import { QUEUE_SETTINGS } from "../src/ops/queue-settings.ts";
import { humanMs } from "./format.ts";

export { checkStatus, DEFAULT_THRESHOLDS, type Thresholds } from "../src/observe/check.ts";

/** One row per queue, in a stable column order. */
export function queueRows(status: QueueStatus[]): Record<string, unknown>[] {
  return status.map((s) => ({
    queue: s.queue,
    "last tick": s.lastTick ?? "never",
    "tick age": humanMs(s.lastTickAgeMs),
    "not ticked": s.eventsSinceTick,
    // The same values as --json: ring tables are numbered from 0.
    "current table": s.currentTable,
    tables: s.tables,
    retention: s.retention === null ? "none" : humanMs(s.retention),
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
        "lag": humanMs(cu.lagMs),
        "polled": `${humanMs(cu.polledAgoMs)} ago`,
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
    out[k.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`)] = k === "retention" && value === null ? "none" : spec.kind === "duration"
      ? humanMs(value) // QueueInfo durations are milliseconds
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
