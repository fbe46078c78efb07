/**
 * Cleanups without hand-written try blocks: `scoped(async (defer) => …)` runs the body,
 * then every cleanup it deferred, last first (close a client before dropping
 * its schema), even when the body throws. Every cleanup runs even when an
 * earlier one fails. The body's error wins; when the body passed, a failing
 * cleanup fails the test (a leak should be seen).
 *
 * A wrapper rather than node:test's `t.after`: it works the same inside
 * `describe` blocks, helpers and loops under Node, Deno and Bun, and a
 * cleanup runs when its scope ends, not when the whole test does.
 */

/** Registers a cleanup; returns its argument's value so `const x = defer.use(open(), close)` reads in one line. */
export interface Defer {
  (cleanup: () => unknown): void;
  /** Defers `close(value)` and returns `value`. */
  use<T>(value: T, close: (value: T) => unknown): T;
}

/**
 * Runs `body` with a `defer` registrar, then the deferred cleanups in reverse.
 *
 * @example
 * ```ts
 * await scoped(async (defer) => {
 *   const sql = defer.use(connect(url), (s) => s.end());
 *   await sql`select 1`;
 * });
 * ```
 */
export async function scoped<T>(body: (defer: Defer) => Promise<T> | T): Promise<T> {
  const cleanups: (() => unknown)[] = [];
  const defer = ((cleanup: () => unknown) => void cleanups.push(cleanup)) as Defer;
  defer.use = (value, close) => (cleanups.push(() => close(value)), value);
  let result: T;
  try {
    result = await body(defer);
  } catch (err) {
    await runAll(cleanups);
    throw err;
  }
  const failures = await runAll(cleanups);
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new AggregateError(failures, `${failures.length} cleanups failed`);
  return result;
}

/** Runs cleanups last first; returns the errors, having run every one. */
async function runAll(cleanups: (() => unknown)[]): Promise<unknown[]> {
  const failures: unknown[] = [];
  while (cleanups.length) {
    try {
      await cleanups.pop()!();
    } catch (err) {
      failures.push(err);
    }
  }
  return failures;
}
