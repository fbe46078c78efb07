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

/** A failed test and, when the runner printed it, the first line of its error. */
export interface Failure {
  name: string;
  error?: string;
}

/**
 * Reads a runner's output line by line and keeps its failed tests with the
 * first line of each one's error: Node's TAP puts the error in the YAML block
 * after `not ok` (`error: 'text'` or `error: |-` then the text), Bun prints
 * `error: text` before `(fail) name`, Deno prints it after `name => file` in
 * its FAILURES list. At most `limit` failures are kept.
 */
export function failureReader(limit = 20): { line(line: string): void; failures: Failure[] } {
  const failures: Failure[] = [];
  let open: Failure | undefined; // a Node or Deno failure waiting for its error line
  let blockNext = false; // Node's `error: |-`: the text is on the next line
  let lastBunError: string | undefined;
  const clip = (s: string) => (s.length > 300 ? `${s.slice(0, 297)}...` : s);
  return {
    failures,
    line(raw: string) {
      // deno-lint-ignore no-control-regex -- strips ANSI colour codes
      const plain = raw.replace(/\x1b\[[0-9;]*m/g, "").trimEnd();
      if (blockNext && open) {
        if (plain.trim() === "") return;
        open.error = clip(plain.trim());
        open = undefined;
        blockNext = false;
        return;
      }
      const name = failedTest(plain);
      if (name !== undefined) {
        let f = failures.find((x) => x.name === name);
        if (!f && failures.length < limit) failures.push(f = { name });
        if (f && /^\(fail\) /.test(plain)) {
          f.error ??= lastBunError;
          open = undefined;
        } else open = f && f.error === undefined ? f : undefined;
        lastBunError = undefined;
        return;
      }
      if (/^\(pass\) /.test(plain)) lastBunError = undefined;
      if (open) {
        const err = /^\s*error: (.*)$/.exec(plain);
        if (!err) return;
        const text = err[1]!.trim();
        if (text === "|-" || text === "|" || text === ">-") blockNext = true;
        else {
          open.error = clip(text.replace(/^'(.*)'$|^"(.*)"$/, "$1$2"));
          open = undefined;
        }
        return;
      }
      // Bun: the first error line since the last test's result.
      const bun = /^(?:error|\w*Error): (.+)$/.exec(plain);
      if (bun && lastBunError === undefined) lastBunError = clip(plain.startsWith("error: ") ? bun[1]! : plain);
    },
  };
}

/** Node's closing TAP counts, `# pass N` then `# fail N`, as printed. */
export function closingLines(out: string): string[] | undefined {
  const m = /^(# pass \d+)$[\s\S]*?^(# fail \d+)$/m.exec(out);
  return m ? [m[1]!, m[2]!] : undefined;
}
