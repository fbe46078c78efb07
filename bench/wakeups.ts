/**
 * The wake-ups scenario: end-to-end latency at a steady rate for plain,
 * Tier A and Tier B workers, woken by notifications (default work()) and
 * polling every `pollMs` (`wakeups: false`), and the statements an idle
 * worker sends per minute either way.
 *
 * @module
 */

import { type Executor, type Keyq, keyq, type TxDriver } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, type Sql } from "./db.ts";
import { QUEUE, setup, teardown } from "./keyq-side.ts";
import type { LatencyResult, Sizes } from "./sizes.ts";
import { type FilePayload, nowMs, produceSteadily, quantile, sleep, until, untilAll } from "./util.ts";

/** The consumer kinds measured. */
export type Kind = "plain" | "exclusive" | "ordered";

/** `driver` with every statement counted (BEGIN and COMMIT included); listen passes through. */
function counted(d: TxDriver): { driver: TxDriver; statements(): number } {
  let n = 0;
  const wrap = (tx: Executor): Executor => ({
    query: (text, params) => (n++, tx.query(text, params)),
    ...(tx.savepoint ? { savepoint: <T>(fn: (sp: Executor) => Promise<T>) => (n++, tx.savepoint!((sp) => fn(wrap(sp)))) } : {}),
    ...(tx.signal ? { signal: tx.signal } : {}),
  });
  const driver: TxDriver = {
    ...d,
    query: (text, params) => (n++, d.query(text, params)),
    transaction: <T>(fn: (tx: Executor) => Promise<T>) => (n += 2, d.transaction((tx) => fn(wrap(tx)))),
  };
  return { driver, statements: () => n };
}

function consumerOf(q: Keyq, kind: Kind, s: Sizes) {
  if (kind === "plain") return q.consumer<FilePayload>(QUEUE, "bench");
  if (kind === "exclusive") return q.exclusive<FilePayload>(QUEUE, "bench", { deferDelay: s.deferMs });
  return q.ordered<FilePayload>(QUEUE, "bench", { slots: s.slots });
}

/**
 * Latency of `kind`: workers (1 for plain, one cursor; `workers` else) run
 * `work()` while one producer sends at a steady `rate` for `seconds`; the
 * handler records now − sentAt. With `wake`, workers keep the default poll
 * back-off and wake on notifications; without, they poll every `pollMs`.
 */
export async function latency(admin: Sql, s: Sizes, seed: number, kind: Kind, wake: boolean): Promise<LatencyResult & { p99: number }> {
  const { schema, loader } = await setup(`wk${kind[0]}${wake ? "w" : "p"}`);
  const conns: Sql[] = [];
  const abort = new AbortController();
  try {
    await consumerOf(loader.q, kind, s).subscribe();
    const latencies: number[] = [];
    const n = kind === "plain" ? 1 : s.workers;
    const working: Promise<unknown>[] = [];
    const modes: string[] = [];
    for (let i = 0; i < n; i++) {
      const sql = connect(`${APP}-wake-${i}`);
      conns.push(sql);
      await sql.unsafe("select 1");
      const q = keyq(fromPostgresJs(sql), { schema });
      q.observe({ on: (e) => void (e.type === "work.mode" && modes.push(e.mode)) });
      working.push(
        consumerOf(q, kind, s).work({
          signal: abort.signal,
          ...(wake ? {} : { wakeups: false, minPollMs: s.pollMs, maxPollMs: s.pollMs }),
          maxEvents: s.maxEvents,
          budgetMs: 30_000,
          handler: (ev) => void latencies.push(nowMs() - ev.payload.sentAt),
        }),
      );
    }
    await until(() => modes.length === n, 10_000, "the workers' wake-up probes");
    if (wake && modes.some((m) => m !== "listen")) throw new Error(`a worker did not listen: ${modes.join(", ")}`);
    await sleep(200); // past the first runs: workers idle (the woken ones sleep out their back-off)
    const { total, ms } = await produceSteadily(
      s.rate,
      s.seconds,
      seed,
      1,
      (evs, at) => loader.q.sendBatch(QUEUE, evs.map((e) => ({ type: e.type, key: e.key, payload: { ...e.payload, sentAt: at } }))),
    );
    await untilAll(`keyq ${kind} latency`, () => latencies.length, total, { produceMs: ms });
    abort.abort();
    await Promise.all(working);
    return { p50: quantile(latencies, 0.5), p95: quantile(latencies, 0.95), p99: quantile(latencies, 0.99), count: latencies.length };
  } finally {
    abort.abort();
    await Promise.all(conns.map((c) => c.end({ timeout: 5 })));
    await teardown(admin, schema, loader);
  }
}

/**
 * Statements per minute of one idle Tier A worker: polling with the default
 * back-off (maxPollMs 5 s), and listening with maxPollMs 60 s (the poll is
 * then only a backstop). Counted after a warm-up that lets the back-off
 * reach its cap.
 */
export async function idleStatements(admin: Sql, warmMs: number, countMs: number): Promise<{ poll: number; wake: number }> {
  const one = async (wake: boolean) => {
    const { schema, loader } = await setup(`idle${wake ? "w" : "p"}`);
    const sql = connect(`${APP}-idle`);
    const abort = new AbortController();
    try {
      await loader.q.exclusive(QUEUE, "bench").subscribe();
      const c = counted(fromPostgresJs(sql));
      const q = keyq(c.driver, { schema });
      const done = q.exclusive(QUEUE, "bench").work({
        signal: abort.signal,
        ...(wake ? { maxPollMs: 60_000 } : { wakeups: false }),
        handler: () => {},
      });
      await sleep(warmMs);
      const before = c.statements();
      await sleep(countMs);
      const perMinute = ((c.statements() - before) * 60_000) / countMs;
      abort.abort();
      await done;
      return perMinute;
    } finally {
      abort.abort();
      await sql.end({ timeout: 5 });
      await teardown(admin, schema, loader);
    }
  };
  const [poll, wake] = await Promise.all([one(false), one(true)]);
  return { poll, wake };
}
