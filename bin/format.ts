/**
 * Argument parsing and plain-text tables for the keyq command line.
 *
 * @module
 */

/** Parsed command line: positional words and `--flag [value]` pairs. */
export interface Args {
  positional: string[];
  flags: Record<string, string | true>;
}

const BOOLEAN_FLAGS = new Set(["json", "force", "force-rotate", "help"]);

/** Splits argv into positional words and flags (`--name value`, `--name=value`, boolean flags). */
export function parseArgs(argv: readonly string[]): Args {
  const positional: string[] = [];
  const flags: Record<string, string | true> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith("--")) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const name = a.slice(2, eq < 0 ? undefined : eq);
    if (eq >= 0) flags[name] = a.slice(eq + 1);
    else if (BOOLEAN_FLAGS.has(name) || i + 1 >= argv.length || argv[i + 1]!.startsWith("--")) flags[name] = true;
    else flags[name] = argv[++i]!;
  }
  return { positional, flags };
}

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
