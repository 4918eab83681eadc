// node bench/e2e/node/main.mjs SYSTEM client URL
// node bench/e2e/node/main.mjs SYSTEM worker URL --concurrency=N [--report-starts] [--ledger=DIR]
//
// One Node process of the benchmark harness: the producer/admin side ("client") or a worker
// process ("worker") of one Node peer; protocol.mjs describes both protocols.

import { parseArgs } from "node:util";
import * as bullmq from "./bullmq.mjs";
import * as graphile from "./graphile.mjs";
import { serveClient, serveWorker } from "./protocol.mjs";

const SYSTEMS = {
  graphile_worker: { peer: graphile, worker: graphile.workerFactory({ batched: false }) },
  graphile_worker_batched: { peer: graphile, worker: graphile.workerFactory({ batched: true }) },
  bullmq: { peer: bullmq, worker: bullmq.workerFactory() },
  bullmq_pg: { peer: bullmq, worker: bullmq.workerFactory() },
};

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    concurrency: { type: "string", default: "10" },
    "report-starts": { type: "boolean", default: false },
    ledger: { type: "string" },
    notify: { type: "boolean", default: true },
    "no-notify": { type: "boolean", default: false },
  },
});
const [name, role, url] = positionals;
const system = SYSTEMS[name];
if (!system || !["client", "worker"].includes(role) || !url) {
  process.stderr.write(`usage: main.mjs {${Object.keys(SYSTEMS).join(",")}} client|worker URL\n`);
  process.exit(2);
}
// The protocol owns stdout; the peers' own logs go to stderr.
console.log = console.info = console.debug = (...args) => console.error(...args);

if (role === "client") {
  await serveClient(await system.peer.makeClient(url));
} else {
  const concurrency = Number.parseInt(values.concurrency, 10);
  await serveWorker(system.worker(url, { concurrency }), {
    ledger: values.ledger,
    reportStarts: values["report-starts"],
  });
}
