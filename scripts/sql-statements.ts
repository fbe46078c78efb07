/**
 * Splits engine SQL into statements and derives the "fresh" form of the
 * frozen migrations: the same text without its function definitions, used
 * only when a schema is installed from nothing (the function set then
 * creates every function once). Used by scripts/build-migrations.ts and the
 * tests; no runtime code imports it.
 *
 * @example
 * ```ts
 * import { splitStatements } from "./sql-statements.ts";
 * splitStatements("select 1; do $$ begin perform 1; end $$;").length; // 2
 * ```
 *
 * @module
 */

/** One statement: the text since the previous one (comments included) up to its `;`. */
export interface Statement {
  /** The whole chunk: leading whitespace and comments, the statement and its `;`. */
  text: string;
  /** The statement without comments, trimmed (for matching). */
  code: string;
}

/** The dollar-quote tag starting at `i` (`$$`, `$keyq$`), or null (`$1`, a lone `$`). */
function dollarTag(sql: string, i: number): string | null {
  const m = /^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/.exec(sql.slice(i, i + 64));
  return m ? m[0] : null;
}

/** The index just past the quoted literal, identifier or comment starting at `i`, or -1 when none starts there. */
function skipQuoted(sql: string, i: number): number {
  const c = sql[i];
  const end = (close: string, from: number): number => {
    const j = sql.indexOf(close, from);
    if (j < 0) throw new Error(`Unterminated ${close === "\n" ? "comment" : `quote ${close}`} at offset ${i}.`);
    return j + close.length;
  };
  if (c === "-" && sql[i + 1] === "-") return sql.indexOf("\n", i) < 0 ? sql.length : end("\n", i);
  if (c === "/" && sql[i + 1] === "*") return end("*/", i + 2); // (nested block comments are not used)
  if (c === '"') return end('"', i + 1); // "" inside an identifier: two adjacent quotes, same result
  if (c === "'") {
    const escapes = /[eE]/.test(sql[i - 1] ?? "") && !/[A-Za-z0-9_]/.test(sql[i - 2] ?? "");
    let j = i + 1;
    for (;;) {
      if (j >= sql.length) throw new Error(`Unterminated string at offset ${i}.`);
      if (escapes && sql[j] === "\\") j += 2;
      else if (sql[j] === "'" && sql[j + 1] === "'") j += 2;
      else if (sql[j] === "'") return j + 1;
      else j++;
    }
  }
  if (c === "$") {
    const tag = dollarTag(sql, i);
    if (tag) return end(tag, i + tag.length);
  }
  return -1;
}

/** Removes `--` and `/* *\/` comments outside quotes. */
export function stripComments(sql: string): string {
  let out = "";
  for (let i = 0; i < sql.length;) {
    const j = skipQuoted(sql, i);
    if (j < 0) out += sql[i++];
    else {
      if (!sql.startsWith("--", i) && !sql.startsWith("/*", i)) out += sql.slice(i, j);
      else out += " ";
      i = j;
    }
  }
  return out;
}

/**
 * Splits `sql` at every `;` outside quotes, dollar quotes and comments. Each
 * statement keeps the comments and blank lines before it; text after the last
 * `;` (comments) is a final statement with empty `code`.
 */
export function splitStatements(sql: string): Statement[] {
  const out: Statement[] = [];
  let start = 0;
  for (let i = 0; i < sql.length;) {
    const j = skipQuoted(sql, i);
    if (j >= 0) {
      i = j;
      continue;
    }
    if (sql[i] === ";") {
      const text = sql.slice(start, i + 1);
      out.push({ text, code: stripComments(text).trim() });
      start = i + 1;
    }
    i++;
  }
  if (start < sql.length) out.push({ text: sql.slice(start), code: stripComments(sql.slice(start)).trim() });
  return out;
}

const DEFINITION = /^create\s+(?:or\s+replace\s+)?function\s+:KEYQ_SCHEMA\.([a-z_][a-z0-9_]*)\s*\(/i;

/** The function a statement defines (`create [or replace] function :KEYQ_SCHEMA.name(`), or null. */
export function definedFunction(s: Statement): string | null {
  const m = DEFINITION.exec(s.code);
  if (m && /\bbegin\s+atomic\b/i.test(stripComments(s.text).replace(/\$([A-Za-z_]\w*)?\$[\s\S]*?\$\1\$/g, ""))) {
    throw new Error(`Function ${m[1]}: a BEGIN ATOMIC body is not supported (use a dollar-quoted body).`);
  }
  return m ? m[1]!.toLowerCase() : null;
}

/**
 * The chunk without the statement and the comment paragraph right above it
 * (a comment separated by a blank line, such as a file's header, stays).
 */
function withoutStatement(s: Statement): string {
  const lead = /^(?:\s|--[^\n]*\n?|\/\*[\s\S]*?\*\/)*/.exec(s.text)![0];
  const cut = lead.lastIndexOf("\n\n");
  return cut < 0 ? "" : lead.slice(0, cut + 1);
}

/**
 * The fresh form of each migration, for installing into an empty schema:
 * every function definition removed, but for the last definition of each
 * `frozen` function (indexes depend on those; the function set never
 * creates them). Throws when a statement left in (a DO block, a default, an
 * index) names a removed function: that migration needs it while it runs.
 */
export function freshMigrations(migrations: readonly string[], frozen: readonly string[]): string[] {
  const split = migrations.map((sql) => splitStatements(sql));
  const last = new Map<string, string>(); // frozen function → "migration index:statement index" of its last definition
  split.forEach((stmts, m) =>
    stmts.forEach((s, i) => {
      const fn = definedFunction(s);
      if (fn && frozen.includes(fn)) last.set(fn, `${m}:${i}`);
    })
  );
  const removed = new Set<string>();
  const fresh = split.map((stmts, m) => {
    let cut = false;
    const text = stmts.map((s, i) => {
      const fn = definedFunction(s);
      if (!fn || last.get(fn) === `${m}:${i}`) return s.text;
      removed.add(fn);
      cut = true;
      return withoutStatement(s);
    }).join("");
    return cut ? text.replace(/\n{3,}/g, "\n\n").replace(/^\n+/, "").replace(/\n+$/, "\n") : migrations[m]!;
  });
  fresh.forEach((sql, m) => {
    for (const s of splitStatements(sql)) {
      if (definedFunction(s)) continue;
      const fn = [...removed].find((f) =>
        new RegExp(`(?<!\\b(?:table|references|into|on|update|from|join)\\s+[:\\w"]*)\\.${f}\\s*\\(`, "i").test(s.code) &&
        !(last.has(f) && Number(last.get(f)!.split(":")[0]) <= m)
      );
      if (fn) {
        throw new Error(`Migration ${m + 1} calls ${fn} before a fresh install defines it (functions come from the function set): ${s.code.slice(0, 80)}…`);
      }
    }
  });
  return fresh;
}
