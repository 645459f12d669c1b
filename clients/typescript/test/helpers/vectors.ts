// Reads the LionAGI 0.27.0 reference records (the repository's copy,
// testdata/lionagi-0.27.0/lionagi-0.27.0.jsonl; or $HISTORYD_VECTORS, a directory or the file,
// when set), as the Go conformance tests do (internal/vectors). The tests keep their expected
// prompt texts as constants and check those constants against the records, so a typo cannot pass
// unnoticed.

import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";

import { repoRoot } from "./repo.js";

const fileName = "lionagi-0.27.0.jsonl";

/** The path of the vector file, or undefined with the places looked at. */
export function locateVectors(): { file: string | undefined; looked: string[] } {
  const looked: string[] = [];
  const env = process.env.HISTORYD_VECTORS;
  if (env) {
    const p = existsSync(env) && statSync(env).isDirectory() ? path.join(env, fileName) : env;
    if (existsSync(p)) return { file: p, looked };
    looked.push(`${p} ($HISTORYD_VECTORS)`);
    return { file: undefined, looked };
  }
  const p = path.join(repoRoot, "testdata", "lionagi-0.27.0", fileName);
  if (existsSync(p)) return { file: p, looked };
  looked.push(p);
  return { file: undefined, looked };
}

/** A record of the vector file. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type VectorRecord = { group: string; name: string; output: any };

/** Returns the record of the given group and name; throws when the file lacks it. */
export function vectorRecord(file: string, group: string, name: string): VectorRecord {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line) continue;
    const rec = JSON.parse(line) as VectorRecord;
    if (rec.group === group && rec.name === name) return rec;
  }
  throw new Error(`no vector record ${group} / ${name} in ${file}`);
}
