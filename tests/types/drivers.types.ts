// Type proof for issue 19 (types that carry the rules): what must compile
// does, and every `@ts-expect-error` line must be an error (tsc fails on an
// unused one). Checked by `npx tsc -p tests/types/tsconfig.json` (CI) and the
// main tsconfig; never run.
import { type Driver, type Keyq, keyq, type KeyqBase, type TxDriver } from "../../mod.ts";
import { fromPg, type PgPoolLike } from "../../src/drivers/pg.ts";
import { fromNeonHttp, fromNeonPool, type NeonHttpLike } from "../../src/drivers/neon.ts";
import { fromPGlite, type PGliteLike } from "../../src/drivers/pglite.ts";
import { fromPostgresJs, type PostgresJsLike } from "../../src/drivers/postgres-js.ts";
import { type BunSqlLike, fromBunSql } from "../../src/drivers/bun-sql.ts";

declare const pool: PgPoolLike;
declare const http: NeonHttpLike;
declare const lite: PGliteLike;
declare const sql: PostgresJsLike;
declare const bun: BunSqlLike;

// Every adapter but Neon HTTP says it has transactions.
export const transactional: TxDriver[] = [fromPg(pool), fromNeonPool(pool), fromPGlite(lite), fromPostgresJs(sql), fromBunSql(bun)];
// @ts-expect-error Neon's HTTP driver has no interactive transactions
export const notTransactional: TxDriver = fromNeonHttp(http);
export const queryOnly: Driver = fromNeonHttp(http);

export async function full(): Promise<void> {
  const q: Keyq = keyq(fromPg(pool));
  await q.migrate();
  // q.transaction(fn): typed by what fn returns, no `!`.
  const n: number = await q.transaction(async (tx) => (await tx.query("select 1")).length);
  await q.transaction((tx) => q.send("files", { type: "A", payload: n }, { tx }));
  await q.consumer("files", "c").run({ handler: () => {} });
  await q.exclusive("files", "x").batch({ handler: () => {} });
  await q.ordered("files", "o", { slots: 4 }).work({ handler: () => {}, signal: AbortSignal.timeout(1) });
}

export async function withoutTransactions(): Promise<void> {
  const q: KeyqBase = keyq(fromNeonHttp(http));
  // Producing, inspecting and consumer handles work over HTTP.
  await q.send("files", { type: "A", payload: 1 });
  await q.status();
  await q.consumer("files", "c").subscribe();
  await q.exclusive("files", "x").seek("earliest");
  await q.ordered("files", "o", { slots: 4 }).slotOf("k");
  // @ts-expect-error migrate() takes a driver with transactions
  await q.migrate();
  // @ts-expect-error so does q.transaction()
  await q.transaction(async () => {});
  // @ts-expect-error a consumer over a driver without transactions cannot consume
  await q.consumer("files", "c").run({ handler: () => {} });
  // @ts-expect-error nor batch()
  await q.exclusive("files", "x").batch({ handler: () => {} });
  // @ts-expect-error nor work()
  await q.ordered("files", "o", { slots: 4 }).work({ handler: () => {} });
  // @ts-expect-error its client is no Keyq
  const full: Keyq = q;
  void full;
  // A driver typed loosely (`transaction` optional) gets the same client.
  const loose: Driver = fromPg(pool);
  // @ts-expect-error Driver does not promise transactions
  await keyq(loose).migrate();
}
