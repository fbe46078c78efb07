/** Reading the test runners' output: closing counts and the names of failed tests. */

/** The closing counts of a runner's output, in one line. */
export function counts(out: string): string {
  // deno-lint-ignore no-control-regex -- strips ANSI colour codes
  const plain = out.replace(/\x1b\[[0-9;]*m/g, "");
  const node = /^(?:#|ℹ) pass (\d+)$[\s\S]*?^(?:#|ℹ) fail (\d+)$/m.exec(plain);
  if (node) {
    const skipped = /^(?:#|ℹ) skipped (\d+)$/m.exec(plain)?.[1] ?? "0";
    return `${node[1]} passed, ${node[2]} failed, ${skipped} skipped`;
  }
  const deno = /(?:ok|FAILED) \| \d+ passed.*\| \d+ failed.*$/m.exec(plain);
  if (deno) return deno[0];
  const bun = /^\s*(\d+) pass$[\s\S]*?^\s*(\d+) fail$/m.exec(plain);
  if (bun) return `${bun[1]} passed, ${bun[2]} failed, ${/^\s*(\d+) skip$/m.exec(plain)?.[1] ?? 0} skipped`;
  return "no test counts found";
}

/**
 * The failed test of one output line, or undefined: Node's TAP `not ok N - name`
 * (nested ones too), Bun's `(fail) name`, Deno's `name => file:line:col` in its FAILURES list.
 */
export function failedTest(line: string): string | undefined {
  // deno-lint-ignore no-control-regex -- strips ANSI colour codes
  const plain = line.replace(/\x1b\[[0-9;]*m/g, "").trimEnd();
  const node = /^\s*not ok \d+ - (.+)$/.exec(plain);
  if (node) return node[1];
  const bun = /^\(fail\) (.+?)(?: \[[\d.]+m?s\])?$/.exec(plain);
  if (bun) return bun[1];
  const deno = /^(\S.*) => (\S+:\d+:\d+)$/.exec(plain);
  return deno ? `${deno[1]} (${deno[2]})` : undefined;
}

/** Node's closing TAP counts, `# pass N` then `# fail N`, as printed. */
export function closingLines(out: string): string[] | undefined {
  const m = /^(# pass \d+)$[\s\S]*?^(# fail \d+)$/m.exec(out);
  return m ? [m[1]!, m[2]!] : undefined;
}
