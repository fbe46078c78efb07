/**
 * The driver × runtime matrix of docs/drivers.md, as the tests use it: the
 * rendering and checking live in scripts/lib/matrix.ts (shared with
 * scripts/matrix.ts); `matrixRows` turns the driver registry
 * (tests/helpers/drivers.ts) into the rows a conformance run records.
 *
 * @example
 * ```ts
 * import { matrixRows } from "./helpers/matrix.ts";
 * matrixRows().map((r) => r.label); // ["postgres.js", "pg Pool", …]
 * ```
 */
import type { MatrixRow } from "../../scripts/lib/matrix.ts";
import { type DriverSpec, driverSpecs } from "./drivers.ts";

export * from "../../scripts/lib/matrix.ts";

/** The consuming column: what the driver can do. */
function consumes(spec: DriverSpec): string {
  if (!spec.transactions) return "no: produce and inspect only";
  return spec.pooled ? "yes, Tier A with several workers" : "yes, one connection";
}

/** The rows of the docs/drivers.md table: every driver of the registry, in its order. */
export function matrixRows(): MatrixRow[] {
  return driverSpecs.map((d) => ({ id: d.id, label: d.label, module: d.module, client: d.client, consumes: consumes(d) }));
}
