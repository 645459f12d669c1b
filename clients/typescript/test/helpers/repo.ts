// The repository root, found upward from this file (test/helpers/ in the sources, build/test/helpers/
// once compiled) by its go.mod.

import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

function findRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(path.join(dir, "go.mod")) && existsSync(path.join(dir, "proto"))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error("historyd tests: the repository root (go.mod, proto/) is not above the tests");
    dir = parent;
  }
}

/** The repository root. */
export const repoRoot = findRoot();

/** The package's directory, clients/typescript. */
export const packageDir = path.join(repoRoot, "clients", "typescript");
