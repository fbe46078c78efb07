/**
 * Fixtures with their cleanup attached: `withFixture(pgFixture(), async (f,
 * defer) => …)` hands the body a migrated client in a fresh schema and closes
 * it afterwards, even when the body throws; the body defers any cleanup of
 * its own (extra connections, pools, servers) with `defer`, which runs before
 * the fixture closes (last registered, first run). See tests/helpers/scope.ts.
 *
 * @example
 * ```ts
 * test("sends", { skip }, () =>
 *   withPg(async (f, defer) => {
 *     const other = defer.use(connect(f.url), (s) => s.end());
 *     await f.q.createQueue("jobs");
 *   }));
 * ```
 */
import type { KeyqOptions } from "../../mod.ts";
import { databaseUrl, dropSchema, freshSchema, type Sql } from "./db.ts";
import { type Fixture, pgFixture, pgliteFixture } from "./keyq.ts";
import { type Defer, scoped } from "./scope.ts";

export type { Defer } from "./scope.ts";

/** What `pgFixture` gives: a fixture on real Postgres plus its postgres.js pool and URL. */
export type PgFixture = Fixture & { sql: Sql; url: string };

/** Anything with an async `close()`. */
export interface Closable {
  close(): Promise<void>;
}

/** Opens `fixture` (a promise or a maker), runs `body` with it, then the body's deferred cleanups, then `close()`. */
export function withFixture<F extends Closable, T>(
  fixture: Promise<F> | (() => Promise<F>),
  body: (f: F, defer: Defer) => Promise<T> | T,
): Promise<T> {
  return scoped(async (defer) => {
    const f = defer.use(await (typeof fixture === "function" ? fixture() : fixture), (x) => x.close());
    return await body(f, defer);
  });
}

type PgOptions = Parameters<typeof pgFixture>[0];

/** `withFixture(pgFixture(options), body)`: real Postgres, a postgres.js pool of `max` (default 4). */
export function withPg<T>(body: (f: PgFixture, defer: Defer) => Promise<T> | T): Promise<T>;
export function withPg<T>(options: PgOptions, body: (f: PgFixture, defer: Defer) => Promise<T> | T): Promise<T>;
export function withPg<T>(
  a: PgOptions | ((f: PgFixture, defer: Defer) => Promise<T> | T),
  b?: (f: PgFixture, defer: Defer) => Promise<T> | T,
): Promise<T> {
  return typeof a === "function" ? withFixture(() => pgFixture(), a) : withFixture(() => pgFixture(a), b!);
}

/** `withFixture(pgliteFixture(options), body)`: the file's shared PGlite, a schema of its own. */
export function withPglite<T>(options: Omit<KeyqOptions, "schema">, body: (f: Fixture, defer: Defer) => Promise<T> | T): Promise<T> {
  return withFixture(() => pgliteFixture(options), body);
}

/**
 * A fresh schema name (not created, not migrated) on the test database for
 * the body; the schema is dropped afterwards with everything in it, after the
 * body's own deferred cleanups (close its connections first with `defer.use`).
 */
export async function withSchema<T>(
  body: (s: { url: string; schema: string }, defer: Defer) => Promise<T> | T,
  prefix?: string,
): Promise<T> {
  const url = (await databaseUrl())!;
  return await scoped(async (defer) => {
    const schema = freshSchema(prefix);
    defer(() => dropSchema(url, schema));
    return await body({ url, schema }, defer);
  });
}
