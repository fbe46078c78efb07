/**
 * keyq: an ordered, immutable event log with per-key consumption on
 * Postgres, for Deno, Bun, Node and edge runtimes.
 *
 * The examples import from JSR (`deno add jsr:@keyq/keyq`, or
 * `npx jsr add @keyq/keyq`): `@keyq/keyq` and `@keyq/keyq/<driver>`. From npm
 * the same modules are `keyq` and `keyq/<driver>` (`npm install keyq`).
 * Start with {@link keyq}: `keyq(driver, options?)` over a driver adapter
 * (`fromPostgresJs`, `fromPg`, `fromNeonPool`, `fromBunSql`, `fromPGlite`).
 *
 * @example
 * ```ts
 * import { keyq } from "@keyq/keyq";
 * import { fromPGlite } from "@keyq/keyq/pglite";
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
export type { ConsumerOptions, ExclusiveOptions, Keyq, KeyqBase, KeyqOptions, OrderedOptions } from "./src/client.ts";
export type { DeadLetters } from "./src/ops/dlq.ts";
export type { Consumer, ConsumerHandle, OrderedConsumer, OrderedHandle, PerEventOnly, StrictOrderedConsumer, SubscribeOptions } from "./src/kinds/consumer.ts";
export type { LogCalls } from "./src/ops/positions.ts";
export type { Controls } from "./src/ops/controls.ts";
export type { Driver, Executor, Row, SqlParam, TxChain, TxDriver } from "./src/driver.ts";
export { KeyqError } from "./src/errors.ts";
export type { KeyqErrorCode } from "./src/errors.ts";
export { latestVersion, migrationSql } from "./src/engine/migrate.ts";
export { grantSql } from "./src/roles/grants.ts";
export type { PayloadSchema, SchemaFor, SchemaResult } from "./src/payload.ts";
export type * from "./src/events/types.ts";
export { drizzleProxy, kyselyDialect } from "./src/orm/handlers.ts";
export type { DrizzleProxyCallback, KyselyConnectionLike, KyselyDialectLike, KyselyDriverLike, KyselyPostgresParts } from "./src/orm/handlers.ts";
export type * from "./src/types.ts";
export { healthHandler, prometheusText } from "./src/observe/health.ts";
export type { HealthOptions } from "./src/observe/health.ts";
export { checkStatus, DEFAULT_THRESHOLDS } from "./src/observe/check.ts";
export type { Thresholds } from "./src/observe/check.ts";
export type { BatchInfo, ConsumerKindName, HandlerCall, LifecycleEvent, Logger, Observable, Observer, SendInfo, WakeMode } from "./src/observe/observer.ts";
