/**
 * A fetch-style health and metrics endpoint over `status()`, for Deno.serve,
 * Bun.serve, Workers and Node adapters: `(req: Request) => Promise<Response>`.
 *
 * Both forms answer HTTP 200 when no threshold of `keyq status --check` is
 * crossed and 503 when one is (or when the database does not answer), so a
 * load balancer or uptime probe reads the verdict from the status alone.
 *
 * - JSON (the default): `{ ok, problems, status }`; the problems name queue,
 *   consumer and slot; `status` is `status()`'s report, durations in
 *   milliseconds (`lastTickAgeMs`, `lagMs`, `polledAgoMs`).
 * - Prometheus text (a path ending in `/metrics`, or an `Accept` header
 *   asking for `text/plain` or OpenMetrics): gauges per queue, consumer and
 *   slot plus `keyq_healthy` (1 or 0), durations in seconds under `_seconds`
 *   names as Prometheus conventions ask. Prometheus drops the samples of a
 *   scrape answered with a non-2xx status; `metricsAlways200: true` keeps
 *   the metrics path at 200 while the database answers (alert on
 *   `keyq_healthy == 0` then).
 *
 * @module
 */

import type { Duration, QueueStatus } from "../types.ts";
import { checkStatus, checkThresholds, DEFAULT_THRESHOLDS, type Thresholds } from "./check.ts";
import type { Observable } from "./observer.ts";

/** Options of `healthHandler`. */
export interface HealthOptions {
  /**
   * The thresholds; default those of `keyq status --check` (tick age 5 min,
   * no dead letters, no blocked keys, no stale cursor). Durations in
   * milliseconds or text (`{ maxLagMs: "1m" }`), like `status()` reports them.
   */
  thresholds?: Thresholds;
  /**
   * Answer the Prometheus text with 200 even when a threshold is crossed
   * (still 503 when the database does not answer), for a scraper that should
   * keep its series; default false: 503, like the JSON.
   */
  metricsAlways200?: boolean;
  /** Only this queue. */
  queue?: string;
  /** A cursor not polled for this long is stale (default: `status()`'s). */
  staleAfter?: Duration;
}

/** Which form a request asks for. */
function wantsText(req: Request): boolean {
  const path = new URL(req.url).pathname;
  if (path.endsWith("/metrics")) return true;
  const accept = req.headers.get("accept") ?? "";
  return /application\/openmetrics-text|text\/plain/i.test(accept) && !/application\/json/i.test(accept);
}

const label = (v: string | number) => String(v).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
const labels = (l: Record<string, string | number>) => `{${Object.entries(l).map(([k, v]) => `${k}="${label(v)}"`).join(",")}}`;

/**
 * `status()` as Prometheus text exposition (version 0.0.4): durations in
 * seconds (`_seconds` names), as Prometheus conventions ask.
 *
 * @example
 * ```ts ignore
 * const status = await q.status();
 * const text = prometheusText(status, checkStatus(status, DEFAULT_THRESHOLDS));
 * ```
 */
export function prometheusText(status: QueueStatus[], problems: readonly string[]): string {
  const out: string[] = [];
  const families = new Map<string, { help: string; lines: string[] }>();
  const put = (name: string, help: string, l: Record<string, string | number>, v: number) => {
    let f = families.get(name);
    if (!f) families.set(name, f = { help, lines: [] });
    f.lines.push(`${name}${labels(l)} ${Number.isFinite(v) ? v : "NaN"}`);
  };
  for (const s of status) {
    const q = { queue: s.queue };
    if (s.lastTickAgeMs !== null) put("keyq_queue_tick_age_seconds", "Seconds since the queue's last tick", q, s.lastTickAgeMs / 1000);
    put("keyq_queue_events_since_tick", "Events committed since the last tick", q, s.eventsSinceTick);
    for (const c of s.consumers) {
      const cl = { ...q, consumer: c.name, kind: c.kind };
      put("keyq_consumer_retries", "Events waiting for another delivery", cl, c.retries);
      put("keyq_consumer_dead_letters", "Dead letters", cl, c.deadLetters);
      put("keyq_consumer_blocked_keys", "Keys blocked behind a failed head (pause)", cl, c.blockedKeys);
      for (const cu of c.cursors) {
        const sl = { ...cl, slot: cu.slot };
        put("keyq_consumer_lag_events", "Events the cursor is behind", sl, cu.lagEvents);
        put("keyq_consumer_lag_seconds", "Seconds the cursor is behind", sl, cu.lagMs / 1000);
        put("keyq_cursor_polled_age_seconds", "Seconds since a batch last looked at the cursor", sl, cu.polledAgoMs / 1000);
        put("keyq_cursor_stale", "1 when nobody polled the cursor for staleAfter", sl, cu.stale ? 1 : 0);
      }
    }
  }
  for (const [name, f] of families) out.push(`# HELP ${name} ${f.help}`, `# TYPE ${name} gauge`, ...f.lines);
  out.push("# HELP keyq_healthy 1 when no threshold of keyq status --check is crossed", "# TYPE keyq_healthy gauge", `keyq_healthy ${problems.length ? 0 : 1}`);
  for (const p of problems) out.push(`# problem: ${p.replace(/\n/g, " ")}`);
  return out.join("\n") + "\n";
}

/**
 * A health handler for `q`: JSON or Prometheus text (see the module), HTTP
 * status from the `status --check` thresholds: 200 healthy, 503 when a
 * threshold is crossed or the database does not answer. Bad thresholds
 * throw `INVALID_INPUT` here, not at the first request.
 *
 * @example
 * ```ts ignore
 * // Deno: serve it beside your app (ignore: it serves until stopped).
 * Deno.serve({ port: 9464 }, healthHandler(q, { thresholds: { maxLag: 10_000, maxLagMs: "1m" } }));
 * ```
 */
export function healthHandler(q: Pick<Observable, "status">, options: HealthOptions = {}): (req: Request) => Promise<Response> {
  const thresholds = options.thresholds ?? DEFAULT_THRESHOLDS;
  checkThresholds(thresholds);
  const metricsStatus = (healthy: boolean) => healthy || options.metricsAlways200 ? 200 : 503;
  return async (req) => {
    const text = wantsText(req);
    let status: QueueStatus[];
    try {
      status = await q.status({
        ...(options.queue !== undefined ? { queue: options.queue } : {}),
        ...(options.staleAfter !== undefined ? { staleAfter: options.staleAfter } : {}),
      });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      return text
        ? new Response(`# keyq status failed: ${message.replace(/\n/g, " ")}\n# TYPE keyq_up gauge\nkeyq_up 0\n`, {
          status: 503,
          headers: { "content-type": "text/plain; version=0.0.4" },
        })
        : Response.json({ ok: false, problems: [`status() failed: ${message}`], status: [] }, { status: 503 });
    }
    const problems = checkStatus(status, thresholds);
    if (text) {
      return new Response(`# TYPE keyq_up gauge\nkeyq_up 1\n${prometheusText(status, problems)}`, {
        status: metricsStatus(problems.length === 0),
        headers: { "content-type": "text/plain; version=0.0.4" },
      });
    }
    return Response.json({ ok: problems.length === 0, problems, status }, { status: problems.length ? 503 : 200 });
  };
}
