/**
 * The result rows of `npm run bench`: each row holds keyq's value and its
 * reference's value per round, the ratio of each round (both measured in
 * the same round, one right after the other), and the target from issue 13.
 * Rendering: a human table, JSON, and the docs/benchmark.md block between markers.
 *
 * @module
 */

import { fmt, fmtRatio, summarize, type Summary } from "./util.ts";

/** A target: a bound on the row's median ratio or on keyq's median value. */
export interface Target {
  on: "ratio" | "keyq";
  op: ">=" | "<=";
  value: number;
}

/** One row of the table. */
export interface Row {
  id: string;
  label: string;
  /** Unit of the keyq and reference values ("ev/s", "ms", "%", ""). */
  unit: string;
  /** What keyq is compared with; "" when the row has no reference. */
  reference: string;
  /** False when keyq / reference means nothing (round trips of two drivers, counts). */
  ratio: boolean;
  target?: Target;
  keyq: number[];
  ref: number[];
  /** keyq / reference of each round where both were measured. */
  ratios: number[];
}

/** A row's figures: medians (min–max) of the rounds and the median ratio. */
export interface RowResult {
  id: string;
  label: string;
  unit: string;
  reference: string;
  keyq: Summary | null;
  ref: Summary | null;
  ratio: Summary | null;
  target: string;
  /** true / false when the row has a target and figures, null otherwise. */
  met: boolean | null;
}

/** "≥ 5×", "≤ 2 %", "≤ 1", or "—". */
export function targetText(t: Target | undefined, unit: string): string {
  if (!t) return "—";
  const op = t.op === ">=" ? "≥" : "≤";
  if (t.on === "ratio") return `${op} ${t.value}×`;
  return `${op} ${t.value}${unit === "%" ? " %" : unit ? ` ${unit}` : ""}`;
}

/** Whether `value` meets `t`; null when the value is missing. */
export function meets(t: Target, value: number | undefined): boolean | null {
  if (value === undefined || !Number.isFinite(value)) return null;
  return t.op === ">=" ? value >= t.value : value <= t.value;
}

/** Medians, ratio and target verdict of one row. */
export function result(r: Row): RowResult {
  const keyq = summarize(r.keyq);
  const ref = summarize(r.ref);
  const ratio = r.ratio ? summarize(r.ratios) : null;
  const value = r.target?.on === "ratio" ? ratio?.median : keyq?.median;
  return {
    id: r.id,
    label: r.label,
    unit: r.unit,
    reference: r.reference,
    keyq,
    ref,
    ratio,
    target: targetText(r.target, r.unit),
    met: r.target ? meets(r.target, value) : null,
  };
}

/** `1,375 ev/s (1,200–1,500)`; only the median for a single round. */
export function cell(x: Summary | null, unit: string): string {
  if (!x) return "—";
  const u = unit === "%" ? " %" : unit ? ` ${unit}` : "";
  return x.rounds.length === 1 ? `${fmt(x.median)}${u}` : `${fmt(x.median)}${u} (${fmt(x.min)}–${fmt(x.max)})`;
}

/** A Markdown table of the rows (aligned, so it reads in a terminal too). */
export function table(rows: readonly RowResult[]): string {
  const head = ["scenario", "keyq", "reference", "ratio", "target", "met"];
  const body = rows.map((r) => [
    r.label,
    cell(r.keyq, r.unit),
    r.reference ? `${r.reference}: ${cell(r.ref, r.unit)}` : "—",
    r.ratio ? fmtRatio(r.ratio.median) : "—",
    r.target,
    r.met === null ? "" : r.met ? "yes" : "**no**",
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  return [line(head), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...body.map(line)].join("\n");
}

const START = "<!-- bench-table:start -->";
const END = "<!-- bench-table:end -->";

/** Replaces the text between the bench-table markers of `readme` with `block`; throws when the markers are missing. */
export function replaceBetweenMarkers(readme: string, block: string): string {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error(`docs/benchmark.md has no "${START}" … "${END}" markers`);
  return `${readme.slice(0, a + START.length)}\n${block}\n${readme.slice(b)}`;
}
