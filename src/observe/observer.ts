/**
 * The lifecycle surface: what keyq tells observers (tracing, metrics, a
 * logger) about sends, batches, handler calls and workers. It imports no
 * telemetry library; `keyq/otel` is one observer built on it, and any other
 * fits the same contract.
 *
 * @module
 */

import type { BatchReport, Duration, KeyqEvent, QueueStatus, RunReport } from "../types.ts";

/** The consumer kind a batch belongs to. */
export type ConsumerKindName = "plain" | "exclusive" | "ordered";

/** One batch as observers see it; the same object is passed to every event of that batch. */
export interface BatchInfo {
  /** The queue read. */
  readonly queue: string;
  /** The consumer reading it. */
  readonly consumer: string;
  /** The consumer's kind. */
  readonly kind: ConsumerKindName;
  /** When the batch started (epoch ms). */
  readonly startedAt: number;
}

/** One handler call: a per-event `handler` (one event) or a `handleBatch` (all of them). */
export interface HandlerCall {
  /** The batch the call belongs to. */
  readonly batch: BatchInfo;
  /** The events handed to the call (one for a per-event handler). */
  readonly events: readonly KeyqEvent<unknown>[];
}

/** One `send` or `sendBatch` call. */
export interface SendInfo {
  /** The queue sent to. */
  readonly queue: string;
  /** Events in the call. */
  readonly count: number;
  /** True for `sendBatch`. */
  readonly batch: boolean;
}

/** How an idle `work()` learns of new events. */
export type WakeMode = "listen" | "poll";

/** Everything keyq reports, one `type` per kind of event. */
export type LifecycleEvent =
  | { type: "sent"; send: SendInfo; ids: readonly string[] }
  | { type: "send.failed"; send: SendInfo; error: unknown }
  | { type: "batch.started"; batch: BatchInfo }
  | { type: "batch.committed"; batch: BatchInfo; report: BatchReport; ms: number }
  | { type: "batch.aborted"; batch: BatchInfo; error: unknown; ms: number }
  | { type: "handler.started"; call: HandlerCall }
  | { type: "handler.ended"; call: HandlerCall; error?: unknown; ms: number }
  | { type: "events.retried"; batch: BatchInfo; count: number }
  | { type: "events.deadLettered"; batch: BatchInfo; count: number }
  | { type: "events.dropped"; batch: BatchInfo; count: number }
  | { type: "events.deferred"; batch: BatchInfo; count: number }
  | { type: "work.started"; queue: string; consumer: string; kind: ConsumerKindName }
  | { type: "work.mode"; queue: string; consumer: string; mode: WakeMode; reason: string }
  | { type: "work.woken"; queue: string; consumer: string }
  | { type: "work.retry"; queue: string; consumer: string; error: unknown; attempt: number; delayMs: number }
  | { type: "work.stopped"; queue: string; consumer: string; report: RunReport };

/**
 * An observer: any of the three hooks. Hooks must not throw (a throwing hook
 * is ignored, it never fails a send or a batch) and should be quick.
 */
export interface Observer {
  /** Hears every lifecycle event. */
  on?(event: LifecycleEvent): void;
  /**
   * Runs one `send`/`sendBatch` (e.g. inside a producer span): it must call
   * `call` once and return its promise; the `trace` it passes (a W3C
   * traceparent, or null) is stored with the events.
   */
  send?<T>(info: SendInfo, call: (trace: string | null) => Promise<T>): Promise<T>;
  /**
   * Runs one handler call (e.g. inside a consumer span, so the handler's
   * own traced work nests under it): it must call `call` once and return
   * what it returned.
   */
  handle?<T>(info: HandlerCall, call: () => T): T;
}

/** A logger: any of the four levels; `console` fits. */
export interface Logger {
  /** Batches started and committed, handler calls. */
  debug?(message: string, data?: Record<string, unknown>): void;
  /** Workers starting, stopping and changing mode. */
  info?(message: string, data?: Record<string, unknown>): void;
  /** Failures, retries and rolled-back batches. */
  warn?(message: string, data?: Record<string, unknown>): void;
  /** Dead letters and faults a worker gave up on. */
  error?(message: string, data?: Record<string, unknown>): void;
}

/** The observers of one client, and the calls keyq makes on them. */
export interface Hub {
  /** True when anyone observes: without observers nothing is wrapped. */
  readonly active: boolean;
  /** Adds an observer; the returned function removes it. */
  add(o: Observer): () => void;
  emit(e: LifecycleEvent): void;
  send<T>(info: SendInfo, call: (trace: string | null) => Promise<T>): Promise<T>;
  handle<T>(info: HandlerCall, call: () => T): T;
}

function quiet(f: () => void): void {
  try {
    f();
  } catch { /* an observer must not break keyq */ }
}

/** A new hub with `initial` observers. */
export function hub(initial: readonly Observer[] = []): Hub {
  let list: Observer[] = [...initial];
  const h: Hub = {
    get active() {
      return list.length > 0;
    },
    add(o) {
      list = [...list, o];
      return () => {
        list = list.filter((x) => x !== o);
      };
    },
    emit(e) {
      for (const o of list) if (o.on) quiet(() => o.on!(e));
    },
    send(info, call) {
      // Each observer with a send hook wraps the next; the innermost trace is stored.
      let trace: string | null = null;
      let run = () => call(trace);
      for (const o of list) {
        if (!o.send) continue;
        const next = run;
        run = () =>
          o.send!(info, (t) => {
            if (t) trace = t;
            return next();
          });
      }
      return run();
    },
    handle(info, call) {
      let run = call;
      for (const o of list) {
        if (!o.handle) continue;
        const next = run;
        run = () => o.handle!(info, next);
      }
      return run();
    },
  };
  return h;
}

/** An observer that writes lifecycle events to `log` (warnings for aborted batches, faults and dead letters). */
export function loggerObserver(log: Logger): Observer {
  const where = (b: { queue: string; consumer: string }) => `${b.queue}/${b.consumer}`;
  return {
    on(e) {
      switch (e.type) {
        case "batch.committed":
          if (e.report.events + e.report.dropped + e.report.deferred > 0) {
            log.debug?.(`keyq: batch of ${where(e.batch)} committed: ${e.report.events} handled in ${e.ms} ms`, { ...e.report });
          }
          return;
        case "batch.aborted":
          return log.warn?.(`keyq: batch of ${where(e.batch)} rolled back: ${message(e.error)}`, { error: e.error });
        case "handler.ended":
          if (e.error !== undefined) {
            const ids = e.call.events.map((x) => x.id).join(", ");
            log.warn?.(`keyq: handler of ${where(e.call.batch)} failed on event ${ids}: ${message(e.error)}`, { error: e.error });
          }
          return;
        case "events.retried":
          return log.info?.(`keyq: ${e.count} event(s) of ${where(e.batch)} scheduled for another try`);
        case "events.deadLettered":
          return log.warn?.(`keyq: ${e.count} event(s) of ${where(e.batch)} moved to the dead letters`);
        case "events.deferred":
          return log.debug?.(`keyq: ${e.count} contended event(s) of ${where(e.batch)} deferred`);
        case "events.dropped":
          return log.debug?.(`keyq: ${e.count} contended event(s) of ${where(e.batch)} dropped (idempotent)`);
        case "work.started":
          return log.info?.(`keyq: worker of ${where(e)} started (${e.kind})`);
        case "work.mode":
          return log.info?.(`keyq: worker of ${where(e)} ${e.mode === "listen" ? "wakes on notifications" : "polls"} (${e.reason})`);
        case "work.retry":
          return log.warn?.(`keyq: worker of ${where(e)} retries in ${e.delayMs} ms (attempt ${e.attempt}): ${message(e.error)}`, { error: e.error });
        case "work.stopped":
          return log.info?.(`keyq: worker of ${where(e)} stopped after ${e.report.events} events`, { ...e.report });
        case "send.failed":
          return log.warn?.(`keyq: send to ${e.send.queue} failed: ${message(e.error)}`, { error: e.error });
      }
    },
  };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * What an observing adapter (`keyq/otel`, the health handler) needs of a
 * client: the client `keyq()` returns fits it.
 */
export interface Observable {
  /** Adds an observer; returns the function that removes it. */
  observe(observer: Observer): () => void;
  /** The client's `status()`. */
  status(options?: { queue?: string; staleAfter?: Duration }): Promise<QueueStatus[]>;
}
