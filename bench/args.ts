/**
 * Command line of `npm run bench`.
 *
 * @module
 */

import { FULL, QUICK, type Sizes } from "./sizes.ts";

/** Every scenario, in the order a round runs them (issue 13's rows first). */
export const SCENARIOS = [
  "exclusive-write",
  "exclusive-hot",
  "backlog",
  "produce-raw",
  "round-trips",
  "ordered",
  "produce-send",
  "produce-batch",
  "produce-dedup",
  "plain",
  "exclusive",
  "latency",
  "retry",
  "queues",
  "wakeups",
] as const;

/** One scenario's name. */
export type ScenarioId = (typeof SCENARIOS)[number];

/** The parsed command line. */
export interface Args {
  rounds: number;
  quick: boolean;
  json: boolean;
  writeReadme: boolean;
  only: ScenarioId[] | null;
  sizes: Sizes;
}

const kebab = (k: string) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** The help text. */
export function usage(): string {
  return [
    "usage: npm run bench -- [--quick] [--rounds N] [--json] [--only a,b] [--write-readme] [--<size> N ...]",
    "  --quick         small sizes, 1 round (a smoke run)",
    "  --rounds N      interleaved rounds (default 5; medians are reported)",
    "  --json          machine-readable results on stdout (progress stays on stderr)",
    "  --only a,b      run only these scenarios",
    "  --write-readme  replace docs/benchmark.md's benchmark table with this run's (full runs only)",
    `scenarios: ${SCENARIOS.join(", ")}`,
    `sizes (full defaults): ${Object.entries(FULL).map(([k, v]) => `--${kebab(k)} ${v}`).join(" ")}`,
  ].join("\n");
}

/** Parses `argv` (without node and the script); throws with the usage on a bad option. */
export function parseArgs(argv: readonly string[]): Args | "help" {
  const quick = argv.includes("--quick");
  const sizes: Sizes = { ...(quick ? QUICK : FULL) };
  const out: Args = { rounds: quick ? 1 : 5, quick, json: false, writeReadme: false, only: null, sizes };
  const sizeFlags = new Map(Object.keys(FULL).map((k) => [`--${kebab(k)}`, k as keyof Sizes]));
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value\n${usage()}`);
      return v;
    };
    const int = (v: string) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${a} needs a positive integer, not "${v}"`);
      return n;
    };
    if (a === "--quick") continue;
    else if (a === "--json") out.json = true;
    else if (a === "--write-readme") out.writeReadme = true;
    else if (a === "--rounds") out.rounds = int(value());
    else if (a === "--only") {
      const ids = value().split(",").map((s) => s.trim());
      for (const s of ids) if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`unknown scenario "${s}"\n${usage()}`);
      out.only = ids as ScenarioId[];
    } else if (sizeFlags.has(a)) sizes[sizeFlags.get(a)!] = int(value());
    else if (a === "--help" || a === "-h") return "help";
    else throw new Error(`unknown option "${a}"\n${usage()}`);
  }
  if (out.writeReadme && (out.quick || out.only)) {
    throw new Error("--write-readme needs a full run: the docs/benchmark.md table shows every row at full size (drop --quick and --only)");
  }
  return out;
}
