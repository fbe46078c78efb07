/**
 * Small helpers of the benchmark: statistics, a seeded PRNG, payloads,
 * timing and progress output.
 *
 * @module
 */

import process from "node:process";

/** Sleeps `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Milliseconds since the epoch with sub-millisecond resolution. */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** The value at quantile `q` (0–1) of `values`, by the nearest-rank method. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** Median, min and max of the rounds of one measurement. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  rounds: number[];
}

/** Summarises the rounds of one measurement (NaN rounds are left out). */
export function summarize(rounds: readonly number[]): Summary | null {
  const ok = rounds.filter((r) => Number.isFinite(r));
  if (ok.length === 0) return null;
  const sorted = [...ok].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median, min: sorted[0]!, max: sorted.at(-1)!, rounds: ok };
}

/** mulberry32: a small seeded PRNG, so every round and both systems get the same keys. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Number of tenants the events are keyed by. */
export const TENANTS = 200;

const TYPES = ["FileCreated", "FileOverwritten", "FileDeleted"] as const;

/** One synthetic lifecycle event: a tenant key and a ~200-byte JSON payload. */
export interface BenchEvent {
  type: string;
  key: string;
  payload: FilePayload;
}

/** The payload: what a storage service would put in a file lifecycle event. */
export interface FilePayload {
  tenant: string;
  path: string;
  size: number;
  etag: string;
  mime: string;
  seq: number;
  /** When the producer sent it (ms since the epoch), for latency. */
  sentAt: number;
}

/** How the keys of a stream are drawn. */
export interface KeyMix {
  /** Distinct keys drawn uniformly (default `TENANTS`). */
  keys?: number;
  /** Share (0–1) of the events that all carry one hot key; the rest are uniform (default 0). */
  hotShare?: number;
  /** Sequence number of the first event (default 0). */
  startSeq?: number;
}

/** `n` events from a seeded stream: random keys out of `mix.keys` (plus a hot key), types in a fixed mix. */
export function makeEvents(n: number, seed: number, mix: KeyMix = {}): BenchEvent[] {
  const rnd = prng(seed);
  const keys = mix.keys ?? TENANTS;
  const width = String(keys - 1).length < 3 ? 3 : String(keys - 1).length;
  const out: BenchEvent[] = [];
  for (let i = 0; i < n; i++) {
    const seq = (mix.startSeq ?? 0) + i;
    const hot = mix.hotShare !== undefined && rnd() < mix.hotShare;
    const t = Math.floor(rnd() * keys);
    const tenant = hot ? "tenant-hot" : `tenant-${String(t).padStart(width, "0")}`;
    const etag = Math.floor(rnd() * 2 ** 52).toString(16).padStart(13, "0").repeat(2).slice(0, 24);
    out.push({
      type: TYPES[seq % 3]!,
      key: tenant,
      payload: {
        tenant,
        path: `/tenants/${tenant}/projects/p-${seq % 97}/files/report-${String(seq).padStart(8, "0")}.parquet`,
        size: Math.floor(rnd() * 50_000_000),
        etag,
        mime: seq % 2 ? "text/csv" : "image/png",
        seq,
        sentAt: 0,
      },
    });
  }
  return out;
}

/** Median of the finite values, NaN when there are none. */
export function median(values: readonly number[]): number {
  return summarize(values)?.median ?? Number.NaN;
}

/** Formats a ratio: `0.86×`, `19.9×`, `0.0023×`; `—` when not finite. */
export function fmtRatio(r: number | null | undefined): string {
  if (r === null || r === undefined || !Number.isFinite(r)) return "—";
  if (r < 0.1) return `${r.toPrecision(2)}×`;
  return `${r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`;
}

/** Prints a progress line to stderr (stdout stays clean for the table or JSON). */
export function progress(line: string): void {
  process.stderr.write(`${line}\n`);
}

/** Formats a number for the table: thousands separators, sensible decimals. */
export function fmt(n: number | undefined, unit = ""): string {
  if (n === undefined || !Number.isFinite(n)) return "—";
  const abs = Math.abs(n);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2;
  return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }) + unit;
}

/** Waits until `check()` is true, polling every `everyMs`; rejects after `timeoutMs`. */
export async function until(check: () => boolean, timeoutMs: number, what: string, everyMs = 2): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/**
 * Waits until `count()` reaches `total` while it keeps moving: rejects when
 * nothing was counted for `stallMs` (default 30 s), when the whole wait
 * passes `limitMs` (default 60 s plus ten times `produceMs`, the time the
 * producer took: a loaded machine may drain slowly, but it drains), or as
 * soon as `failed()` names a reason (a consumer loop that died). The message
 * says how far it got and why it stopped.
 */
export async function untilAll(
  what: string,
  count: () => number,
  total: number,
  o: { produceMs: number; stallMs?: number; limitMs?: number; failed?: () => string | undefined },
): Promise<void> {
  const started = Date.now();
  const stallMs = o.stallMs ?? 30_000;
  const limitMs = o.limitMs ?? 60_000 + 10 * o.produceMs;
  let last = count();
  let moved = started;
  while (count() < total) {
    const now = Date.now();
    const n = count();
    if (n !== last) [last, moved] = [n, now];
    const why = o.failed?.() ??
      (now - moved > stallMs ? `nothing handled for ${stallMs} ms` : now - started > limitMs ? `the wait passed ${limitMs} ms` : undefined);
    if (why !== undefined) {
      throw new Error(`Gave up waiting for ${what}: ${n} of ${total} handled after ${now - started} ms (${why})`);
    }
    await sleep(2);
  }
}

/**
 * Sends `rate × seconds` events of the seeded stream at a steady rate: every
 * `stepMs` the events due by then go in one `send` call, stamped with the
 * time of that call (the latency scenarios' producer, the same on every
 * side). Resolves with how many went and how long sending took (ms).
 */
export async function produceSteadily(
  rate: number,
  seconds: number,
  seed: number,
  stepMs: number,
  send: (events: BenchEvent[], at: number) => Promise<unknown>,
): Promise<{ total: number; ms: number }> {
  const total = Math.round(rate * seconds);
  const events = makeEvents(total, seed);
  let sent = 0;
  const t0 = performance.now();
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * rate));
    if (due > sent) {
      const at = nowMs();
      await send(events.slice(sent, due), at);
      sent = due;
    }
    await sleep(stepMs);
  }
  return { total, ms: performance.now() - t0 };
}
