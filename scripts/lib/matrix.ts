/**
 * The driver × runtime matrix of docs/drivers.md: what the conformance suite records
 * (`.conformance/<runtime>.json`), how a cell renders, and how the docs/drivers.md
 * section is generated and read back. Used by scripts/matrix.ts (which writes or
 * checks the whole section) and, through tests/helpers/matrix.ts, by
 * tests/conformance.test.ts (which records its run and checks its own runtime's
 * column of docs/drivers.md). Each run records the rows of the tests' driver
 * registry (tests/helpers/drivers.ts) it ran, so this module needs no test code.
 *
 * @example
 * ```ts
 * import { renderCell } from "./matrix.ts";
 * renderCell({ planned: 24, passed: 24, failed: 0 }); // "✓ 24"
 * ```
 */

/** The JavaScript runtimes of the matrix. */
export type Runtime = "node" | "deno" | "bun";

/** What one driver did under one runtime. */
export interface CellResult {
  /** Tests the suite registered for this driver. */
  planned: number;
  passed: number;
  failed: number;
  /** Set when the runtime cannot run the driver (then nothing ran). */
  skipReason?: string;
}

/** One row of the table: a driver of the tests' registry, as docs/drivers.md shows it. */
export interface MatrixRow {
  /** Stable id, the key of `cells`: `pg-pool`. */
  id: string;
  /** The row name: `pg Pool`. */
  label: string;
  /** The subpath export the adapter comes from. */
  module: string;
  /** What the user passes in. */
  client: string;
  /** The consuming column: what the driver can do. */
  consumes: string;
}

/** One runtime's conformance run, as written to `.conformance/<runtime>.json`. */
export interface RunResult {
  runtime: Runtime;
  /** e.g. `node v20.20.2`. */
  version: string;
  /** ISO time the run finished. */
  finishedAt: string;
  /** The drivers of the run, in docs/drivers.md order. */
  rows: MatrixRow[];
  /** Per driver id. */
  cells: Record<string, CellResult>;
}

/** The runtimes, in column order. */
export const RUNTIMES: { id: Runtime; label: string }[] = [
  { id: "node", label: "Node" },
  { id: "deno", label: "Deno" },
  { id: "bun", label: "Bun" },
];

/** The markers around the generated section of docs/drivers.md. */
export const START = "<!-- drivers:start -->";
export const END = "<!-- drivers:end -->";

/** `✓ 24` (all passed), `✗ 20/24` (failures), `… 3/24` (a partial run), `—` (not on this runtime). */
export function renderCell(c: CellResult | undefined): string {
  if (!c) return "?";
  if (c.skipReason) return "—";
  if (c.failed > 0) return `✗ ${c.passed}/${c.planned}`;
  if (c.passed < c.planned) return `… ${c.passed}/${c.planned}`;
  return `✓ ${c.passed}`;
}

const row = (cells: string[]): string => `| ${cells.join(" | ")} |`;

/** The rows of the first runtime (in column order) that recorded a run. */
function rowsOf(results: Partial<Record<Runtime, RunResult>>): MatrixRow[] {
  return RUNTIMES.map((r) => results[r.id]?.rows).find((rows) => rows !== undefined) ?? [];
}

/** The matrix table from one result per runtime (missing runtimes show `?`). */
export function renderTable(results: Partial<Record<Runtime, RunResult>>): string {
  const lines = [
    row(["Driver", "Import", "You pass", "Consumes", ...RUNTIMES.map((r) => r.label)]),
    row(["---", "---", "---", "---", ...RUNTIMES.map(() => ":---:")]),
  ];
  for (const d of rowsOf(results)) {
    lines.push(row([d.label, `\`${d.module}\``, d.client, d.consumes, ...RUNTIMES.map((r) => renderCell(results[r.id]?.cells[d.id]))]));
  }
  return lines.join("\n");
}

/** The table rows of the docs/drivers.md section, as `{ label → { Node → cell } }`. */
export function parseTable(section: string): Map<string, Map<string, string>> {
  const rows = section.split("\n").filter((l) => l.startsWith("|")).map((l) => l.slice(1, -1).split(" | ").map((c) => c.trim()));
  const header = rows[0] ?? [];
  const out = new Map<string, Map<string, string>>();
  for (const r of rows.slice(2)) out.set(r[0]!, new Map(header.map((h, i) => [h, r[i] ?? ""])));
  return out;
}

/** The text between the drivers markers, or null when the markers are missing. */
export function sectionOf(readme: string): string | null {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  return a < 0 || b < a ? null : readme.slice(a + START.length, b);
}

/**
 * Compares one runtime's column of the docs/drivers.md table with what that runtime
 * just ran; returns the differences (empty when they agree).
 */
export function checkColumn(readme: string, result: RunResult): string[] {
  const section = sectionOf(readme);
  if (section === null) return [`docs/drivers.md has no ${START} … ${END} section`];
  const table = parseTable(section);
  const label = RUNTIMES.find((r) => r.id === result.runtime)!.label;
  const problems: string[] = [];
  for (const d of result.rows) {
    const want = renderCell(result.cells[d.id]);
    const have = table.get(d.label)?.get(label);
    if (have !== want) problems.push(`${d.label} × ${label}: docs/drivers.md says ${JSON.stringify(have ?? null)}, this run gives ${JSON.stringify(want)}`);
  }
  return problems;
}

/** The versions line under the table. */
export function renderVersions(results: Partial<Record<Runtime, RunResult>>): string {
  return RUNTIMES.map((r) => results[r.id]?.version ?? `${r.id}: not run`).join(", ");
}
