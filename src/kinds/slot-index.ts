/**
 * Slot-index work the engine leaves to the client: CREATE INDEX
 * CONCURRENTLY cannot run inside a transaction, so `subscribe` and a Tier A
 * bucket growth (`prepare_exclusive`) return the statements, the client runs
 * them here on a connection of its own, then calls the engine again.
 *
 * @module
 */

import type { ConsumerContext } from "../batch/batch.ts";
import { mapError } from "../engine/reply.ts";

/**
 * Runs the engine's concurrent index statements one by one, outside any
 * transaction, so producers keep writing while they run. False when the
 * server cannot build concurrently (the engine then builds in place).
 *
 * @example
 * ```ts
 * import type { ConsumerContext } from "../batch/batch.ts";
 * async function build(ctx: ConsumerContext, r: { build?: string[] }): Promise<boolean> {
 *   return await buildConcurrently(ctx, r.build ?? []);
 * }
 * console.log(typeof build);
 * ```
 */
export async function buildConcurrently(ctx: ConsumerContext, statements: string[]): Promise<boolean> {
  for (const text of statements) {
    try {
      await ctx.driver.query(text);
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (code === "25001" || code === "0A000" || code === "42501") return false; // inside a transaction block, unsupported, or a role that does not own the tables (the engine builds inline)
      // Another subscriber's concurrent build of the same index (deadlock,
      // lock wait, a build that failed): the next round looks again.
      if (code !== "40P01" && code !== "55P03" && code !== "42P07" && code !== "XX000") throw mapError(err, ctx.schema);
    }
  }
  return true;
}
