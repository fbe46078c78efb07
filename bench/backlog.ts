/**
 * The read-limit scenario: plain consumers on a large backlog against a raw
 * keyset read of the same events, in one schema.
 *
 * @module
 */

import { analyzeSchema, APP, type Sql } from "./db.ts";
import { drive, load, openPool, QUEUE, setup, teardown } from "./keyq-side.ts";
import * as raw from "./raw-side.ts";
import type { Sizes } from "./sizes.ts";
import { makeEvents } from "./util.ts";

/** What the read-limit scenario measured, events/s each. */
export interface BacklogResult {
  raw: number;
  /** The same keyset read on one connection: what one plain worker (one cursor) could reach. */
  raw1: number;
  plain1000: number;
  plainDefault: number;
  plain4x1000: number;
}

/**
 * Plain consumption of one `backlogEvents` backlog (no-op handler), three
 * plain consumers subscribed before loading so each reads the whole log:
 * 1 worker with maxEvents 1000, 1 worker with the default, `workers`
 * workers with maxEvents 1000; and the read-limit reference: a raw keyset
 * read of the same events from an equivalent table over `rawConns`
 * connections, and over one. `flip` reverses the order (interleaved rounds).
 */
export async function backlog(admin: Sql, sizes: Sizes, seed: number, flip: boolean): Promise<BacklogResult> {
  const { schema, loader } = await setup("backlog");
  const tag = `${APP}-wbacklog`;
  const n = sizes.backlogEvents;
  const out: BacklogResult = { raw: Number.NaN, raw1: Number.NaN, plain1000: Number.NaN, plainDefault: Number.NaN, plain4x1000: Number.NaN };
  try {
    for (const name of ["m1000", "mdefault", "w4"]) await loader.q.consumer(QUEUE, name).subscribe();
    const events = makeEvents(n, seed);
    await load(loader.q, events, sizes.batchSize);
    await raw.createTable(loader.sql, schema);
    for (let i = 0; i < n; i += sizes.batchSize) await raw.insertDocument(loader.sql, schema, events.slice(i, i + sizes.batchSize));
    await analyzeSchema(admin, schema);
    const steps: (() => Promise<void>)[] = [
      async () => void (out.raw = await raw.keysetRead(schema, sizes.rawConns, sizes.batchSize)),
      async () => void (out.raw1 = await raw.keysetRead(schema, 1, sizes.batchSize)),
      async () => void (out.plain1000 = await plainRun(schema, tag, "m1000", 1, n, sizes, 1000)),
      async () => void (out.plainDefault = await plainRun(schema, tag, "mdefault", 1, n, sizes, undefined)),
      async () => void (out.plain4x1000 = await plainRun(schema, tag, "w4", sizes.workers, n, sizes, 1000)),
    ];
    for (const step of flip ? steps.reverse() : steps) await step();
    return out;
  } finally {
    await teardown(admin, schema, loader);
  }
}

/** Events/s of `workers` workers of plain consumer `name` reading `n` events. */
async function plainRun(schema: string, tag: string, name: string, workers: number, n: number, sizes: Sizes, maxEvents: number | undefined): Promise<number> {
  const pool = await openPool(schema, `${tag}-${name}`, workers);
  try {
    const d = await drive(pool, "plain", name, n, sizes, maxEvents === undefined ? {} : { maxEvents }, schema);
    return n / d.seconds;
  } finally {
    await Promise.all(pool.map((c) => c.sql.end({ timeout: 5 })));
  }
}
