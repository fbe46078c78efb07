/**
 * Raw Postgres references, on the same driver (postgres.js, defaults) as the
 * keyq side: a table equivalent to keyq's event table (the same columns,
 * one btree index), filled by one-JSON-document inserts and read back by
 * keyset pagination over several connections. They bound what a queue on
 * this database and driver can reach: the producer, the read limit and
 * the floor under a woken read.
 *
 * @module
 */

import { APP, connect, dropSchema, freshSchema, type Sql } from "./db.ts";
import { sinkDdl, sinkInsert } from "./keyq-side.ts";
import type { LatencyResult, Sizes } from "./sizes.ts";
import { type BenchEvent, makeEvents, nowMs, produceSteadily, quantile, untilAll } from "./util.ts";

/** keyq's event columns; a primary key on ev_id stands in for keyq's (ev_txid, ev_id) index. */
export async function createTable(sql: Sql, schema: string): Promise<void> {
  await sql.unsafe(`create schema if not exists "${schema}"`);
  await sql.unsafe(`create table "${schema}".raw_event (
    ev_id    bigserial primary key,
    ev_txid  xid8 not null default pg_current_xact_id(),
    ev_time  timestamptz not null default now(),
    ev_type  text not null,
    ev_key   text,
    ev_data  jsonb not null)`);
}

/** One statement, one bind parameter: the whole batch as one JSON document. */
export async function insertDocument(sql: Sql, schema: string, events: readonly BenchEvent[]): Promise<void> {
  const doc = JSON.stringify(events.map((e) => ({ type: e.type, key: e.key, payload: e.payload })));
  await sql.unsafe(
    `insert into "${schema}".raw_event (ev_type, ev_key, ev_data)
     select e->>'type', e->>'key', e->'payload' from jsonb_array_elements($1::text::jsonb) as e`,
    [doc],
  );
}

/**
 * Events/s of one connection inserting `batchEvents` events in
 * one-document statements of `batchSize` (the sendBatch reference).
 */
export async function produceDocument(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const schema = freshSchema("raw_batch");
  const sql = connect(`${APP}-raw`);
  try {
    await createTable(sql, schema);
    const events = makeEvents(sizes.batchEvents, seed);
    await insertDocument(sql, schema, events.slice(0, sizes.batchSize)); // warm-up, as on the keyq side
    const t0 = performance.now();
    for (let i = 0; i < events.length; i += sizes.batchSize) await insertDocument(sql, schema, events.slice(i, i + sizes.batchSize));
    return sizes.batchEvents / ((performance.now() - t0) / 1000);
  } finally {
    await sql.end({ timeout: 5 });
    await dropSchema(admin, schema);
  }
}

/**
 * Milliseconds of the writes a batch with dedup keys cannot avoid, done by
 * hand in one statement: `n` events (one JSON document, as sendBatch's
 * reference) and one row per key in a table shaped like keyq's `dedup` (a
 * unique (queue, key) index and an expiry index), every key new. No lookup,
 * no conflict handling, no per-event answer: a floor under the dedup row,
 * not a peer.
 */
export async function dedupDocument(admin: Sql, n: number, seed: number): Promise<number> {
  const schema = freshSchema("raw_dedup");
  const sql = connect(`${APP}-raw`);
  try {
    await createTable(sql, schema);
    await sql.unsafe(`create table "${schema}".raw_dedup (
      queue_id   int not null,
      dedup_key  text not null,
      ev_id      bigint not null,
      expires_at timestamptz not null,
      primary key (queue_id, dedup_key))`);
    await sql.unsafe(`create index on "${schema}".raw_dedup (queue_id, expires_at)`);
    const insert = (events: readonly BenchEvent[], tag: string) =>
      sql.unsafe(
        `with e as (
           select x->>'type' as t, x->>'key' as k, x->'payload' as p, x->>'dedupKey' as d
             from jsonb_array_elements($1::text::jsonb) as x),
         c as (
           insert into "${schema}".raw_dedup (queue_id, dedup_key, ev_id, expires_at)
           select 1, e.d, nextval('"${schema}".raw_event_ev_id_seq'), now() + interval '300 seconds'
             from e order by e.d collate "C"
           returning dedup_key, ev_id)
         insert into "${schema}".raw_event (ev_id, ev_type, ev_key, ev_data)
         select c.ev_id, e.t, e.k, e.p from e join c on c.dedup_key = e.d`,
        [JSON.stringify(events.map((e, i) => ({ type: e.type, key: e.key, payload: e.payload, dedupKey: `d-${seed}-${tag}${i}` })))],
      );
    const events = makeEvents(n, seed);
    await insert(events.slice(0, 10), "warm-"); // as on the keyq side
    const t0 = performance.now();
    await insert(events, "");
    return performance.now() - t0;
  } finally {
    await sql.end({ timeout: 5 });
    await dropSchema(admin, schema);
  }
}

/**
 * Events/s of reading every row of `raw_event` in `schema`, `page` rows a
 * statement by keyset (`ev_id > last order by ev_id limit page`), the id
 * range split evenly over `conns` connections that read at once.
 */
export async function keysetRead(schema: string, conns: number, page: number): Promise<number> {
  const pool = Array.from({ length: conns }, (_, i) => connect(`${APP}-rawread-${i}`));
  try {
    const [b] = await pool[0]!.unsafe(`select min(ev_id)::text as lo, max(ev_id)::text as hi from "${schema}".raw_event`);
    const lo = Number(b!.lo) - 1;
    const hi = Number(b!.hi);
    for (const sql of pool) await sql.unsafe("select 1");
    const step = Math.ceil((hi - lo) / conns);
    let rows = 0;
    const t0 = performance.now();
    await Promise.all(pool.map(async (sql, i) => {
      let last = lo + i * step;
      const end = Math.min(hi, last + step);
      while (last < end) {
        const got = await sql.unsafe(
          `select ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data from "${schema}".raw_event
            where ev_id > $1 and ev_id <= $2 order by ev_id limit $3`,
          [last, end, page],
        );
        if (got.length === 0) break;
        rows += got.length;
        last = Number(got.at(-1)!.ev_id);
      }
    }));
    return rows / ((performance.now() - t0) / 1000);
  } finally {
    await Promise.all(pool.map((sql) => sql.end({ timeout: 5 })));
  }
}

/**
 * Events/s of the Tier A writing handler's work with no queue at all: the
 * same `writeEvents` inserts (one statement each, into a table of the same
 * shape) from `workers` connections, 100 to a transaction (Tier A's default
 * batch). What the handlers' own writes can reach on this database and
 * driver: keyq's writing row cannot pass it, whatever the queue costs.
 */
export async function writeCeiling(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const schema = freshSchema("raw_write");
  const pool = Array.from({ length: sizes.workers }, (_, i) => connect(`${APP}-rawwrite-${i}`));
  try {
    await pool[0]!.unsafe(`create schema "${schema}"`);
    await pool[0]!.unsafe(sinkDdl(schema));
    const events = makeEvents(sizes.writeEvents, seed, { keys: sizes.writeKeys });
    const insert = sinkInsert(schema);
    for (const sql of pool) await sql.unsafe("select 1");
    const t0 = performance.now();
    await Promise.all(pool.map(async (sql, w) => {
      const mine = events.filter((_, i) => i % pool.length === w);
      for (let i = 0; i < mine.length; i += 100) {
        await sql.begin(async (tx) => {
          for (const e of mine.slice(i, i + 100)) await tx.unsafe(insert, [String(e.payload.seq), e.key, String(e.payload.seq)]);
        });
      }
    }));
    return events.length / ((performance.now() - t0) / 1000);
  } finally {
    await Promise.all(pool.map((sql) => sql.end({ timeout: 5 })));
    await dropSchema(admin, schema);
  }
}

/**
 * The floor under every woken row, with no queue: the same producer loop
 * inserts each due group of events into a plain table in one statement that
 * also sends `pg_notify` (delivered at its commit); a listener hears it and
 * one reader connection fetches the new rows by id (one round trip, no
 * transaction, no position kept); latency is now − sentAt per row. What a
 * notification and a read cost on this machine at all: a queue's woken
 * latency cannot go below it.
 */
export async function floorLatency(admin: Sql, s: Sizes, seed: number): Promise<LatencyResult & { p99: number }> {
  const schema = freshSchema("raw_wake");
  const prod = connect(`${APP}-floor-prod`);
  const reader = connect(`${APP}-floor-read`);
  const ear = connect(`${APP}-floor-listen`);
  try {
    await prod.unsafe(`create schema "${schema}"`);
    await prod.unsafe(`create table "${schema}".ev (id bigint generated always as identity primary key, doc jsonb not null)`);
    await reader.unsafe("select 1");
    const latencies: number[] = [];
    let last = 0;
    let reading = false;
    let again = false;
    let broken: unknown;
    const read = async (): Promise<void> => {
      if (reading) return void (again = true);
      reading = true;
      do {
        again = false;
        const rows = await reader.unsafe(`select id, doc from "${schema}".ev where id > $1 order by id limit 1000`, [last]);
        const at = nowMs();
        for (const r of rows) latencies.push(at - (r.doc as { sentAt: number }).sentAt);
        if (rows.length > 0) last = Number(rows.at(-1)!.id);
        if (rows.length === 1000) again = true;
      } while (again);
      reading = false;
    };
    const heard = await ear.listen(schema, () => void read().catch((err: unknown) => (broken ??= err)));
    const { total, ms } = await produceSteadily(s.rate, s.seconds, seed, 1, (evs, at) =>
      prod.unsafe(
        `with i as (insert into "${schema}".ev (doc) select x from jsonb_array_elements($1::text::jsonb) x returning id)
           select pg_catalog.pg_notify($2, pg_catalog.max(id)::text) from i`,
        [JSON.stringify(evs.map((e) => ({ ...e.payload, sentAt: at }))), schema],
      ));
    await untilAll("no-queue floor latency", () => latencies.length, total, {
      produceMs: ms,
      failed: () => (broken === undefined ? undefined : `the reader failed: ${broken}`),
    });
    await heard.unlisten();
    return { p50: quantile(latencies, 0.5), p95: quantile(latencies, 0.95), p99: quantile(latencies, 0.99), count: latencies.length };
  } finally {
    await Promise.all([prod, reader, ear].map((c) => c.end({ timeout: 5 })));
    await dropSchema(admin, schema);
  }
}
