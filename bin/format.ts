/**
 * Argument parsing and plain-text tables for the keyq command line.
 *
 * @module
 */

/** Parsed command line: positional words and `--flag [value]` pairs. */
export interface Args {
  /** Words that are not flags, in order (the command first). */
  positional: string[];
  /** Flags by name without dashes: `true` for boolean flags, the text for value flags. */
  flags: Record<string, string | true>;
}

/** Which flags exist: boolean ones take no value, value ones need exactly one. */
export interface FlagSpec {
  /** Flags that take no value (`--json`). */
  boolean: readonly string[];
  /** Flags that need a value (`--key K` or `--key=K`). */
  value: readonly string[];
  /** Short aliases: `{ h: "help" }` makes `-h` mean `--help`. */
  short?: Readonly<Record<string, string>>;
}

/** A command line the parser refused: the CLI prints the message and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * Splits argv into positional words and flags, strictly: an unknown flag, a
 * value flag without a value, or a value given to a boolean flag is a
 * `UsageError` naming the flag. `--` ends the flags.
 */
export function parseArgs(argv: readonly string[], spec: FlagSpec): Args {
  const positional: string[] = [];
  const flags: Record<string, string | true> = {};
  const known = [...spec.boolean, ...spec.value];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") {
      positional.push(...argv.slice(i + 1));
      break;
    }
    if (!a.startsWith("-") || a === "-" || /^-\d/.test(a)) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const raw = a.slice(0, eq < 0 ? undefined : eq);
    const name = raw.startsWith("--") ? raw.slice(2) : spec.short?.[raw.slice(1)];
    if (name === undefined || !known.includes(name)) throw new UsageError(`Unknown flag ${raw}${hint(raw, known)}; see "keyq --help".`);
    if (spec.boolean.includes(name)) {
      if (eq >= 0) throw new UsageError(`Flag --${name} takes no value (got "${a.slice(eq + 1)}").`);
      flags[name] = true;
    } else if (eq >= 0) {
      flags[name] = a.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith("-") && next !== "-" && !/^-\d/.test(next))) {
        throw new UsageError(`Flag --${name} needs a value: --${name} <value>.`);
      }
      flags[name] = next;
      i++;
    }
  }
  return { positional, flags };
}

/** ", did you mean --x?" when a known flag is close to `raw`. */
function hint(raw: string, known: readonly string[]): string {
  const word = raw.replace(/^-+/, "");
  const close = known.find((k) => k.startsWith(word) || word.startsWith(k) || distance(k, word) <= 2);
  return close ? ` (did you mean --${close}?)` : "";
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}

export { humanMs } from "../src/observe/check.ts";

function cell(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

/** Renders rows (objects) as an aligned text table; a single object as key/value lines. */
export function renderTable(rows: unknown, columns?: string[]): string {
  if (!Array.isArray(rows)) {
    if (rows && typeof rows === "object") {
      const entries = Object.entries(rows as Record<string, unknown>);
      const w = Math.max(...entries.map(([k]) => k.length), 1);
      return entries.map(([k, v]) => `${k.padEnd(w)}  ${cell(v)}`).join("\n");
    }
    return cell(rows);
  }
  if (rows.length === 0) return "(none)";
  const cols = columns ?? [...new Set(rows.flatMap((r) => Object.keys(r as object)))];
  const body = rows.map((r) => cols.map((c) => cell((r as Record<string, unknown>)[c])));
  const widths = cols.map((c, i) => Math.max(c.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => cells.map((x, i) => x.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(cols), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n");
}
