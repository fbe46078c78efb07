#!/usr/bin/env node
/**
 * The `keyq` command: see bin/cli.ts, or run `keyq --help`.
 *
 * @module
 */
import { main, report } from "./cli.ts";

type Proc = { argv: string[]; env: Record<string, string | undefined>; exitCode?: number };
const proc = (globalThis as unknown as { process: Proc }).process;

main(proc.argv.slice(2), proc.env).then(
  (code) => (proc.exitCode = code),
  (err) => (proc.exitCode = report(err)),
);
