/**
 * keyq: an ordered, immutable event log with per-key consumption on
 * Postgres, for Deno, Bun, Node and edge runtimes.
 *
 * @example
 * ```ts
 * import { keyq } from "keyq";
 * import { fromPGlite } from "keyq/pglite";
 * import { PGlite } from "@electric-sql/pglite";
 *
 * const q = keyq(fromPGlite(new PGlite()));
 * await q.migrate();
 * await q.createQueue("files");
 * await q.send("files", { type: "FileCreated", payload: { path: "/a" }, key: "tenant-1" });
 * ```
 *
 * @module
 */

export { keyq } from "./src/client.ts";
export type { ConsumerOptions, ExclusiveOptions, Keyq, KeyqOptions, OrderedOptions } from "./src/client.ts";
export type { DeadLetters } from "./src/ops/dlq.ts";
export type { Consumer, OrderedConsumer, SubscribeOptions } from "./src/kinds/consumer.ts";
export type { LogCalls } from "./src/ops/positions.ts";
export type { Controls } from "./src/ops/controls.ts";
export type { Driver, Executor, Row, SqlParam } from "./src/driver.ts";
export { KeyqError } from "./src/errors.ts";
export type { KeyqErrorCode } from "./src/errors.ts";
export { latestVersion, migrationSql } from "./src/engine/migrate.ts";
export type { PayloadSchema, SchemaResult } from "./src/payload.ts";
export type * from "./src/types.ts";
