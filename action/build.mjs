// Bundles src/main.js and src/post.js, with what they require, into dist/ (committed: the
// runner runs an action as it is checked out, installing nothing). `node build.mjs OUTDIR`
// builds elsewhere, for the test that checks dist/ is the build of src/.
import * as esbuild from "esbuild";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(process.argv[2] || path.join(here, "dist"));

await esbuild.build({
  entryPoints: [path.join(here, "src", "main.js"), path.join(here, "src", "post.js")],
  outdir,
  absWorkingDir: here, // module names in the bundle: the same from any directory
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  legalComments: "none",
  banner: { js: "// Built from action/src by action/build.mjs (npm run build): do not edit." },
  logLevel: "warning",
});
