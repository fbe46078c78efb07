/**
 * Lifecycle events around one batch and its handler calls: the batch runner
 * is left alone; its settings get wrapped handlers and its report becomes
 * the events. Nothing is wrapped when no one observes.
 *
 * @module
 */

import type { AnyEvent, BatchSettings } from "../batch/settings.ts";
import type { BatchReport } from "../types.ts";
import type { BatchInfo, HandlerCall, Hub } from "./observer.ts";

type Thenable = { then(ok: () => void, fail: (e: unknown) => void): unknown };
const isThenable = (x: unknown): x is Thenable => typeof (x as Thenable | null)?.then === "function";

/** Calls `f` as handler call `call`: started/ended events around the observers' `handle` hooks. */
function observed<R>(h: Hub, call: HandlerCall, f: () => R): R {
  h.emit({ type: "handler.started", call });
  const t0 = Date.now();
  const end = (error?: unknown, failed = false) =>
    h.emit(failed ? { type: "handler.ended", call, error, ms: Date.now() - t0 } : { type: "handler.ended", call, ms: Date.now() - t0 });
  let r: R;
  try {
    r = h.handle(call, f);
  } catch (err) {
    end(err, true);
    throw err;
  }
  if (!isThenable(r)) {
    end();
    return r;
  }
  return (r as unknown as Promise<unknown>).then(
    (v) => (end(), v),
    (err) => {
      end(err, true);
      throw err;
    },
  ) as R;
}

/** The settings of one observed batch: the same, with handlers that report their calls. */
function wrapped(h: Hub, batch: BatchInfo, s: BatchSettings): BatchSettings {
  const { handler, handleBatch } = s;
  return {
    ...s,
    handler: handler && ((ev, tx, ctx) => observed(h, { batch, events: [ev] }, () => handler(ev, tx, ctx))),
    handleBatch: handleBatch && ((evs: AnyEvent[], ctx) => observed(h, { batch, events: evs }, () => handleBatch(evs, ctx))),
  };
}

/** Runs one batch (`body` with the settings to use) and reports it to the hub's observers. */
export async function observeBatch(
  h: Hub,
  base: Omit<BatchInfo, "startedAt">,
  s: BatchSettings,
  body: (s: BatchSettings) => Promise<BatchReport>,
): Promise<BatchReport> {
  if (!h.active) return await body(s);
  const batch: BatchInfo = { ...base, startedAt: Date.now() };
  h.emit({ type: "batch.started", batch });
  let r: BatchReport;
  try {
    r = await body(wrapped(h, batch, s));
  } catch (error) {
    h.emit({ type: "batch.aborted", batch, error, ms: Date.now() - batch.startedAt });
    throw error;
  }
  h.emit({ type: "batch.committed", batch, report: r, ms: Date.now() - batch.startedAt });
  if (r.retried > 0) h.emit({ type: "events.retried", batch, count: r.retried });
  if (r.deadLettered > 0) h.emit({ type: "events.deadLettered", batch, count: r.deadLettered });
  if (r.dropped > 0) h.emit({ type: "events.dropped", batch, count: r.dropped });
  if (r.deferred > 0) h.emit({ type: "events.deferred", batch, count: r.deferred });
  return r;
}
