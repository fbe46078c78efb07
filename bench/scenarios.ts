/**
 * The scenarios of `npm run bench`: which rows each one fills, and one
 * round of it. Within a round a scenario measures keyq and its reference
 * one right after the other (the order alternates between rounds), so each
 * round's ratio compares figures taken under the same load.
 *
 * @module
 */

import type { ScenarioId } from "./args.ts";
import { backlog } from "./backlog.ts";
import type { Sql } from "./db.ts";
import * as kq from "./keyq-side.ts";
import * as boss from "./pgboss-side.ts";
import * as raw from "./raw-side.ts";
import { queuesPair } from "./queues.ts";
import { roundTrips } from "./roundtrips.ts";
import * as wk from "./wakeups.ts";
import type { Row, Target } from "./rows.ts";
import type { ConsumeResult, Sizes } from "./sizes.ts";
import { fmt, fmtRatio, progress } from "./util.ts";

/** Rows, by id, in table order; statement errors pg-boss's loops retried; failed measurements. */
export interface Book {
  rows: Map<string, Row>;
  retried: Map<string, number>;
  errors: string[];
}

const atLeast = (value: number, on: Target["on"] = "ratio"): Target => ({ on, op: ">=", value });
const atMost = (value: number, on: Target["on"] = "keyq"): Target => ({ on, op: "<=", value });

const FLOOR = "insert + NOTIFY, a listener, one read by id (no queue)";

type RowSpec = [id: string, label: string, unit: string, reference: string, ratio: boolean, target?: Target];

/** The rows each scenario fills. */
export function rowSpecs(id: ScenarioId, s: Sizes): RowSpec[] {
  const w = s.workers;
  switch (id) {
    case "exclusive-write":
      return [
        [
          "write",
          `Tier A, ${w} workers, ${fmt(s.writeKeys)} uniform keys, handler does one insert through tx`,
          "ev/s",
          "pg-boss singleton (singletonKey), same insert",
          true,
          atLeast(5),
        ],
        ["write-deferrals", `Tier A deferrals at ${fmt(s.writeKeys)} uniform keys, ${w} workers (per 100 events)`, "%", "", false, atMost(2)],
        ["write-ceiling", `Tier A writing (row above) vs its inserts with no queue`, "ev/s", `the same inserts, ${w} conns, 100 a transaction`, true],
      ];
    case "exclusive-hot":
      return [
        ["hot", `Tier A, ${w} workers, ${fmt(s.hotEvents)} events, ${s.hotPercent} % on one key, one insert`, "ev/s", "pg-boss singleton, same", true],
        ["hot-deferrals", `Tier A deferrals, ${s.hotPercent} % on one key (per 100 events)`, "%", "", false],
      ];
    case "backlog":
      return [
        [
          "backlog-1000",
          `plain consume, ${fmt(s.backlogEvents)} backlog, no-op, 1 worker, maxEvents 1000`,
          "ev/s",
          `raw keyset read (${s.rawConns} conns)`,
          true,
          atLeast(0.5),
        ],
        [
          "backlog-default",
          `plain consume, ${fmt(s.backlogEvents)} backlog, no-op, 1 worker, default maxEvents`,
          "ev/s",
          `raw keyset read (${s.rawConns} conns)`,
          true,
          atLeast(0.5),
        ],
        ["plain-workers", `plain consumer, ${w} workers vs 1 (same backlog, maxEvents 1000)`, "ev/s", "keyq, 1 worker", true, atLeast(1)],
        ["backlog-1conn", `plain consume, 1 worker, maxEvents 1000, vs a keyset read on 1 connection`, "ev/s", "raw keyset read (1 conn)", true],
      ];
    case "produce-raw":
      return [["produce-raw", `sendBatch ${fmt(s.batchSize)}, 1 connection`, "ev/s", "raw one-JSON-document insert", true, atLeast(0.9)]];
    case "round-trips":
      return [
        ["rt-statement", "network round trips per statement, postgres.js adapter", "", "pg adapter", false, atMost(1)],
        ["rt-send", "network round trips per send, postgres.js adapter", "", "pg adapter", false],
        ["rt-batch", "network round trips per plain batch (10 events, no-op; run's tick included), postgres.js adapter", "", "pg adapter", false, atMost(3)],
        ["rt-cold-plain", "network round trips of a cold run() (fresh connection, 10 events), plain, postgres.js", "", "pg adapter", false, atMost(8)],
        ["rt-cold-exclusive", "the same, Tier A, postgres.js", "", "pg adapter", false, atMost(8)],
        ["rt-cold-ordered", "the same, Tier B over 4 slots, postgres.js", "", "pg adapter", false, atMost(8)],
      ];
    case "ordered":
      return [
        ["ordered", `Tier B, ${s.slots} slots, ${w} workers, no-op`, "ev/s", "pg-boss key_strict_fifo", true, atLeast(20)],
        ["ordered-default", `Tier B, ${s.slots} slots, ${w} workers, no-op, default maxEvents`, "ev/s", "pg-boss key_strict_fifo", true, atLeast(15)],
        [
          "ordered-plain-small",
          `Tier B, ${s.slots} slots, ${w} workers, no-op, maxEvents ${
            fmt(s.maxEvents)
          }, vs one plain consumer with the same maxEvents (the engine's cost per batch)`,
          "ev/s",
          `plain consumer, 1 worker, maxEvents ${fmt(s.maxEvents)}`,
          true,
        ],
        [
          "ordered-plain",
          `Tier B, ${s.slots} slots, ${w} workers, default maxEvents, vs one plain consumer (same ${fmt(s.orderedEvents)} events)`,
          "ev/s",
          "plain consumer, 1 worker, default maxEvents",
          true,
          atLeast(1),
        ],
        [
          "ordered-plain-long",
          `the same, ${fmt(s.orderedLongEvents)} events (each fresh connection's cold first batch weighs less)`,
          "ev/s",
          "plain consumer, 1 worker, default maxEvents",
          true,
          atLeast(1),
        ],
        [
          "ordered-warm",
          `Tier B, ${s.slots} slots, ${w} workers, default maxEvents, ${
            fmt(s.orderedEvents)
          } events, on warm connections (they just read the same events as another consumer)`,
          "ev/s",
          "the same on fresh connections (row ordered-default)",
          true,
        ],
        ["ordered-warm-boss", `Tier B on warm connections (row above) vs pg-boss key_strict_fifo`, "ev/s", "pg-boss key_strict_fifo", true],
        ["ra-ordered", `rows read per event: Tier B, ${s.slots} slots, default maxEvents (↓)`, "", "", false, atMost(1.05)],
      ];
    case "produce-send":
      return [["produce-send", "send, 1 connection", "ev/s", "pg-boss send", true]];
    case "produce-batch":
      return [["produce-batch", `sendBatch ${fmt(s.batchSize)}, 1 connection`, "ev/s", "pg-boss insert", true]];
    case "produce-dedup":
      return [
        ["dedup-small", `one sendBatch of ${fmt(s.dedupSmall)} events with dedup keys (↓)`, "ms", "", false],
        ["dedup-large", `one sendBatch of ${fmt(s.dedupLarge)} events with dedup keys (↓)`, "ms", "", false, atMost(1500)],
        [
          "dedup-floor",
          `the same ${fmt(s.dedupLarge)} events vs their two writes by hand (↓)`,
          "ms",
          "one statement: the events and a row per key, all new",
          true,
        ],
      ];
    case "plain":
      return [
        ["plain", `plain consume, 1 worker, maxEvents ${s.maxEvents}, no-op`, "ev/s", "pg-boss standard", true],
        ["stmt-plain", "statements per batch: plain (↓)", "", "pg-boss queries", true],
        ["ra-plain", "rows read per event: plain (↓)", "", "pg-boss", true],
      ];
    case "exclusive":
      return [
        ["exclusive", `Tier A, ${w} workers, 200 keys, no-op, deferDelay ${s.deferMs} ms`, "ev/s", "pg-boss singleton", true],
        ["stmt-exclusive", "statements per batch: Tier A (↓)", "", "pg-boss queries", true],
        ["ra-exclusive", "rows read per event: Tier A (↓)", "", "pg-boss", true],
      ];
    case "latency":
      return [
        ["latency-p50", `Tier A latency p50 at ${s.rate}/s (↓)`, "ms", "pg-boss singleton", true],
        ["latency-p95", `Tier A latency p95 at ${s.rate}/s (↓)`, "ms", "pg-boss singleton", true],
      ];
    case "queues":
      return [
        [
          "queues-run",
          `run() of one plain consumer (10 events), ${fmt(s.manyQueues)} queues in the schema (↓)`,
          "ms",
          "the same, 10 queues",
          true,
          atMost(1.2, "ratio"),
        ],
        ["queues-cold", `cold run() (fresh connection), ${fmt(s.manyQueues)} queues (↓)`, "ms", "the same, 10 queues", true, atMost(1.2, "ratio")],
        ["queues-cold-nt", `the same, postgres.js fetch_types: false, ${fmt(s.manyQueues)} queues (↓)`, "ms", "the same, 10 queues", true],
        ["queues-tick", `tick() of one queue, ${fmt(s.manyQueues)} queues (↓)`, "ms", "the same, 10 queues", true, atMost(1.2, "ratio")],
        ["queues-status", `status() over ${fmt(s.manyQueues)} queues, per queue (↓)`, "ms", "the same, 10 queues", true, atMost(1.2, "ratio")],
        ["queues-maintain", `maintain() over ${fmt(s.manyQueues)} queues, per queue (↓)`, "ms", "the same, 10 queues", true, atMost(1.2, "ratio")],
      ];
    case "retry":
      return [["retry", `retry: every event fails once, Tier A, ${w} workers`, "ev/s", "pg-boss singleton", true]];
    case "wakeups": {
      const ref = `pg-boss singleton, ${w} fetch loops, poll ${s.pollMs} ms`;
      const rows: RowSpec[] = [];
      for (
        const [kind, name] of [["plain", "plain, 1 worker"], ["exclusive", `Tier A, ${w} workers`], [
          "ordered",
          `Tier B ${s.slots} slots, ${w} workers`,
        ]] as const
      ) {
        rows.push(
          [`wake-${kind}-p50`, `${name}: latency p50 at ${s.rate}/s, wake-ups (↓)`, "ms", ref, true, atMost(3)],
          [`wake-${kind}-p99`, `${name}: latency p99 at ${s.rate}/s, wake-ups (↓)`, "ms", ref, true, atMost(15)],
          [`poll-${kind}-p50`, `${name}: latency p50 at ${s.rate}/s, polling every ${s.pollMs} ms (↓)`, "ms", ref, true],
          [`poll-${kind}-p99`, `${name}: latency p99 at ${s.rate}/s, polling every ${s.pollMs} ms (↓)`, "ms", ref, true],
        );
      }
      for (const [kind, name] of [["plain", "plain"], ["exclusive", "Tier A"], ["ordered", "Tier B"]] as const) {
        for (const q of ["p50", "p99"] as const) {
          rows.push([`floor-${kind}-${q}`, `${name}, wake-ups: latency ${q} vs the no-queue floor (↓)`, "ms", FLOOR, true]);
        }
      }
      rows.push(
        ["idle-wake", "idle statements per minute, 1 Tier A worker, wake-ups, maxPollMs 60 s (↓)", "", "polling, default back-off (maxPollMs 5 s)", true],
      );
      return rows;
    }
  }
}

/** Declares every row of `ids`, in order, so the table keeps it. */
export function declare(book: Book, ids: readonly ScenarioId[], s: Sizes): void {
  for (const id of ids) {
    for (const [rid, label, unit, reference, ratio, target] of rowSpecs(id, s)) {
      book.rows.set(rid, { id: rid, label, unit, reference, ratio, ...(target ? { target } : {}), keyq: [], ref: [], ratios: [] });
    }
  }
}

/** Records one round of a row: both values and, when both are there, their ratio. */
function put(book: Book, id: string, keyq: number | null | undefined, ref?: number | null): void {
  const row = book.rows.get(id)!;
  const k = keyq ?? Number.NaN;
  const r = ref ?? Number.NaN;
  row.keyq.push(k);
  row.ref.push(r);
  if (Number.isFinite(k) && Number.isFinite(r) && r !== 0) row.ratios.push(k / r);
}

/** Runs `fn`; on a throw, records the failure and returns null. */
async function measure<T>(book: Book, what: string, fn: () => Promise<T>): Promise<T | null> {
  try {
    return await fn();
  } catch (err) {
    const msg = `${what} failed: ${(err as Error).stack ?? err}`;
    book.errors.push(msg);
    progress(`  ! ${msg}`);
    return null;
  }
}

/** Runs keyq's and the reference's measurement in `keyqFirst` order. */
async function both<A, B>(book: Book, id: string, keyqFirst: boolean, k: () => Promise<A>, r: () => Promise<B>): Promise<[A | null, B | null]> {
  if (keyqFirst) {
    const a = await measure(book, `${id} (keyq)`, k);
    return [a, await measure(book, `${id} (reference)`, r)];
  }
  const b = await measure(book, `${id} (reference)`, r);
  return [await measure(book, `${id} (keyq)`, k), b];
}

const ev = (x: number | null | undefined) => (x === null || x === undefined ? "error" : `${fmt(x)} ev/s`);
const vs = (k: number | null | undefined, r: number | null | undefined, ref: string) => `keyq ${ev(k)} · ${ref} ${ev(r)} · ${fmtRatio(k && r ? k / r : null)}`;

function noteRetried(book: Book, id: string, r: ConsumeResult | null): void {
  if (r?.errors) book.retried.set(id, (book.retried.get(id) ?? 0) + Number(r.errors.split(" ")[0]));
}

/** One round of scenario `id`; returns the progress line's details. */
export async function runScenario(book: Book, id: ScenarioId, admin: Sql, s: Sizes, seed: number, keyqFirst: boolean): Promise<string> {
  switch (id) {
    case "exclusive-write":
    case "exclusive-hot": {
      const hot = id === "exclusive-hot";
      const [k, b] = await both(book, id, keyqFirst, () => kq.exclusiveWrite(admin, s, seed, hot), () => boss.exclusiveWrite(admin, s, seed, hot));
      noteRetried(book, id, b);
      const deferrals = k?.deferred === undefined ? null : (100 * k.deferred) / (hot ? s.hotEvents : s.writeEvents);
      put(book, hot ? "hot" : "write", k?.eventsPerSec, b?.eventsPerSec);
      put(book, hot ? "hot-deferrals" : "write-deferrals", deferrals);
      const line = `${vs(k?.eventsPerSec, b?.eventsPerSec, "pg-boss")} · keyq deferrals ${fmt(deferrals ?? undefined)} %`;
      if (hot) return line;
      const c = await measure(book, `${id} (no queue)`, () => raw.writeCeiling(admin, s, seed));
      put(book, "write-ceiling", k?.eventsPerSec, c);
      return `${line} · no queue ${ev(c)}`;
    }
    case "backlog": {
      const r = await measure(book, id, () => backlog(admin, s, seed, !keyqFirst));
      put(book, "backlog-1000", r?.plain1000, r?.raw);
      put(book, "backlog-default", r?.plainDefault, r?.raw);
      put(book, "plain-workers", r?.plain4x1000, r?.plain1000);
      put(book, "backlog-1conn", r?.plain1000, r?.raw1);
      return r
        ? `raw ${ev(r.raw)} (1 conn ${ev(r.raw1)}) · keyq maxEvents 1000 ${ev(r.plain1000)} · default ${ev(r.plainDefault)} · ${s.workers} workers ${
          ev(r.plain4x1000)
        }`
        : "error";
    }
    case "produce-raw": {
      const [k, r] = await both(book, id, keyqFirst, () => kq.produceBatch(admin, s, seed), () => raw.produceDocument(admin, s, seed));
      put(book, id, k, r);
      return vs(k, r, "raw insert");
    }
    case "round-trips": {
      const [js, pg] = await both(book, id, keyqFirst, () => roundTrips(admin, s, "postgres-js"), () => roundTrips(admin, s, "pg"));
      put(book, "rt-statement", js?.perStatement, pg?.perStatement);
      put(book, "rt-send", js?.perSend, pg?.perSend);
      put(book, "rt-batch", js?.perBatch, pg?.perBatch);
      for (const kind of ["plain", "exclusive", "ordered"] as const) put(book, `rt-cold-${kind}`, js?.cold[kind], pg?.cold[kind]);
      return `per statement: postgres.js ${fmt(js?.perStatement)}, pg ${fmt(pg?.perStatement)} · per send: postgres.js ${fmt(js?.perSend)}, pg ${
        fmt(pg?.perSend)
      } · ` +
        `per batch: postgres.js ${fmt(js?.perBatch)}, pg ${fmt(pg?.perBatch)} · cold plain/Tier A/Tier B: postgres.js ${
          js ? Object.values(js.cold).join("/") : "?"
        }, pg ${pg ? Object.values(pg.cold).join("/") : "?"}`;
    }
    case "produce-send":
    case "produce-batch": {
      const single = id === "produce-send";
      const [k, b] = await both(
        book,
        id,
        keyqFirst,
        () => (single ? kq.produceSingle : kq.produceBatch)(admin, s, seed),
        () => (single ? boss.produceSingle : boss.produceBatch)(admin, s, seed),
      );
      put(book, id, k, b);
      return vs(k, b, "pg-boss");
    }
    case "produce-dedup": {
      const a = await measure(book, id, () => kq.produceDedup(admin, s.dedupSmall, seed));
      const [b, f] = await both(
        book,
        id,
        keyqFirst,
        () => kq.produceDedup(admin, s.dedupLarge, seed),
        () => raw.dedupDocument(admin, s.dedupLarge, seed),
      );
      put(book, "dedup-small", a);
      put(book, "dedup-large", b);
      put(book, "dedup-floor", b, f);
      return `${fmt(s.dedupSmall)} events ${fmt(a ?? undefined)} ms · ${fmt(s.dedupLarge)} events ${fmt(b ?? undefined)} ms · by hand ${
        fmt(f ?? undefined)
      } ms`;
    }
    case "plain":
    case "exclusive":
    case "ordered": {
      const fk = id === "plain" ? kq.consumePlain : id === "exclusive" ? kq.consumeExclusive : kq.consumeOrdered;
      const fb = id === "plain" ? boss.consumePlain : id === "exclusive" ? boss.consumeExclusive : boss.consumeOrdered;
      const [k, b] = await both(book, id, keyqFirst, () => fk(admin, s, seed), () => fb(admin, s, seed));
      noteRetried(book, id, b);
      put(book, id, k?.eventsPerSec, b?.eventsPerSec);
      if (id !== "ordered") {
        put(book, `stmt-${id}`, k?.roundTripsPerBatch, b?.roundTripsPerBatch);
        put(book, `ra-${id}`, k?.readAmp, b?.readAmp);
        return vs(k?.eventsPerSec, b?.eventsPerSec, "pg-boss");
      }
      const [d, p] = await both(
        book,
        "ordered-default",
        keyqFirst,
        () => kq.consumeOrderedDefault(admin, s, seed),
        () => kq.consumePlainLikeOrdered(admin, s, seed),
      );
      // The same events through one plain consumer in batches of maxEvents: what a batch of that size costs without slots.
      const small = await measure(book, "ordered-plain-small (reference)", () => kq.consumePlainLikeOrderedSmall(admin, s, seed));
      put(book, "ordered-plain-small", k?.eventsPerSec, small?.eventsPerSec);
      put(book, "ordered-default", d?.eventsPerSec, b?.eventsPerSec);
      put(book, "ordered-plain", d?.eventsPerSec, p?.eventsPerSec);
      put(book, "ra-ordered", d?.readAmp);
      const [dl, pl] = await both(
        book,
        "ordered-plain-long",
        keyqFirst,
        () => kq.consumeOrderedDefault(admin, s, seed, s.orderedLongEvents),
        () => kq.consumePlainLikeOrdered(admin, s, seed, s.orderedLongEvents),
      );
      put(book, "ordered-plain-long", dl?.eventsPerSec, pl?.eventsPerSec);
      // The cold first batches of 4 fresh backends weigh on a 10,000-event run; the same run on warm ones.
      const warm = await measure(book, "ordered-warm", () => kq.consumeOrderedWarm(admin, s, seed));
      put(book, "ordered-warm", warm?.eventsPerSec, d?.eventsPerSec);
      put(book, "ordered-warm-boss", warm?.eventsPerSec, b?.eventsPerSec);
      return `${vs(k?.eventsPerSec, b?.eventsPerSec, "pg-boss")} · default maxEvents ${ev(d?.eventsPerSec)} · plain ${ev(p?.eventsPerSec)}` +
        ` · ${fmt(s.orderedLongEvents)} events: Tier B ${ev(dl?.eventsPerSec)} · plain ${ev(pl?.eventsPerSec)} · warm Tier B ${ev(warm?.eventsPerSec)}`;
    }
    case "latency": {
      const [k, b] = await both(book, id, keyqFirst, () => kq.latencyExclusive(admin, s, seed), () => boss.latencyExclusive(admin, s, seed));
      put(book, "latency-p50", k?.p50, b?.p50);
      put(book, "latency-p95", k?.p95, b?.p95);
      return `keyq p50 ${fmt(k?.p50)} ms p95 ${fmt(k?.p95)} ms · pg-boss p50 ${fmt(b?.p50)} ms p95 ${fmt(b?.p95)} ms`;
    }
    case "queues": {
      const pair = await measure(book, id, () => queuesPair(admin, s.manyQueues, 10, s.queueSamples));
      const [many, few] = pair ?? [null, null];
      put(book, "queues-run", many?.run, few?.run);
      put(book, "queues-cold", many?.cold, few?.cold);
      put(book, "queues-cold-nt", many?.coldNoTypes, few?.coldNoTypes);
      put(book, "queues-tick", many?.tick, few?.tick);
      put(book, "queues-status", many?.statusPerQueue, few?.statusPerQueue);
      put(book, "queues-maintain", many?.maintainPerQueue, few?.maintainPerQueue);
      const ms = (x: number | undefined) => `${fmt(x)} ms`;
      return `run ${ms(many?.run)} vs ${ms(few?.run)} · cold ${ms(many?.cold)} vs ${ms(few?.cold)} · tick ${ms(many?.tick)} vs ${ms(few?.tick)}` +
        ` · status/queue ${ms(many?.statusPerQueue)} vs ${ms(few?.statusPerQueue)} · maintain/queue ${ms(many?.maintainPerQueue)} vs ${
          ms(few?.maintainPerQueue)
        }`;
    }
    case "retry": {
      const [k, b] = await both(book, id, keyqFirst, () => kq.retryExclusive(admin, s, seed), () => boss.retryExclusive(admin, s, seed));
      noteRetried(book, id, b);
      put(book, id, k?.eventsPerSec, b?.eventsPerSec);
      return vs(k?.eventsPerSec, b?.eventsPerSec, "pg-boss");
    }
    case "wakeups": {
      const b = keyqFirst ? null : await measure(book, `${id} (pg-boss)`, () => boss.latencyExclusive(admin, s, seed));
      const parts: string[] = [];
      for (const kind of ["plain", "exclusive", "ordered"] as const) {
        const order = keyqFirst ? [true, false] : [false, true];
        for (const wake of order) {
          const r = await measure(book, `${id} (${kind}, ${wake ? "wake-ups" : "polling"})`, () => wk.latency(admin, s, seed, kind, wake));
          const tag = `${wake ? "wake" : "poll"}-${kind}`;
          put(book, `${tag}-p50`, r?.p50, b?.p50 ?? Number.NaN);
          put(book, `${tag}-p99`, r?.p99, b?.p99 ?? Number.NaN);
          parts.push(`${tag} p50 ${fmt(r?.p50)} p99 ${fmt(r?.p99)} ms`);
        }
      }
      const b2 = b ?? await measure(book, `${id} (pg-boss)`, () => boss.latencyExclusive(admin, s, seed));
      if (!b) {
        // pg-boss ran last this round: fill in the reference of the rows above.
        for (const row of book.rows.values()) {
          if (!/^(wake|poll)-/.test(row.id)) continue;
          const ref = row.id.endsWith("p50") ? b2?.p50 : b2?.p99;
          row.ref[row.ref.length - 1] = ref ?? Number.NaN;
          const k = row.keyq[row.keyq.length - 1]!;
          if (ref && Number.isFinite(k)) row.ratios.push(k / ref);
        }
      }
      const floor = await measure(book, `${id} (no-queue floor)`, () => raw.floorLatency(admin, s, seed));
      for (const kind of ["plain", "exclusive", "ordered"] as const) {
        for (const q of ["p50", "p99"] as const) {
          const row = book.rows.get(`wake-${kind}-${q}`)!;
          put(book, `floor-${kind}-${q}`, row.keyq.at(-1), floor?.[q]);
        }
      }
      parts.push(`no-queue floor p50 ${fmt(floor?.p50)} p99 ${fmt(floor?.p99)} ms`);
      const idle = await measure(book, `${id} (idle)`, () => wk.idleStatements(admin, s.seconds * 3_000, s.seconds * 6_000));
      put(book, "idle-wake", idle?.wake, idle?.poll);
      return `${parts.join(" · ")} · pg-boss p50 ${fmt(b2?.p50)} p99 ${fmt(b2?.p99)} ms · idle statements/min wake ${fmt(idle?.wake)} poll ${fmt(idle?.poll)}`;
    }
  }
}
