// The two line protocols a Node peer speaks with the benchmark harness (bench/e2e).
//
// A worker process speaks the protocol of bench/e2e/_worker.py: "READY" once set up, then on
// "GO" it runs the peer's worker, "S <i> <monotonic ns>" when the handler of task i starts
// (with --report-starts), and on "STOP" it stops the worker gracefully and writes
// "DONE <peak RSS KiB> <CPU seconds since GO>". process.hrtime is libuv's CLOCK_MONOTONIC, the
// clock of Python's time.monotonic_ns, so the harness can subtract its submit times.
//
// A client process (the producer and admin side) reads one JSON request a line,
// {"op": name, ...arguments}, and answers each with one JSON line, {"value": ...} or
// {"error": message}, in order (see serveClient).

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

function write(line) {
  process.stdout.write(`${line}\n`);
}

function peakRssKib() {
  const status = readFileSync("/proc/self/status", "utf8");
  const line = status.split("\n").find((l) => l.startsWith("VmHWM:"));
  return line ? Number.parseInt(line.split(/\s+/)[1], 10) : process.resourceUsage().maxRSS;
}

function cpuSeconds() {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

/**
 * Run a worker under the harness's protocol. `worker` has open(), run() (starts the peer's
 * worker and resolves once it runs) and stop() (graceful). Every handler start goes through
 * the `onStart(payload)` the factory receives; the task numbers it saw are written to the
 * ledger directory at STOP, so the harness can check each task ran exactly once.
 */
export async function serveWorker(makeWorker, { ledger, reportStarts }) {
  const seen = [];
  const onStart = (payload) => {
    seen.push(payload.i);
    if (reportStarts) write(`S ${payload.i} ${process.hrtime.bigint()}`);
  };
  const worker = await makeWorker(onStart);
  await worker.open();
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  write("READY");
  let cpuAtGo = cpuSeconds();
  let command = await nextCommand(lines);
  if (command === "GO") {
    cpuAtGo = cpuSeconds();
    await worker.run();
    command = await nextCommand(lines);
  }
  await worker.stop();
  if (ledger) writeFileSync(join(ledger, `${process.pid}.json`), JSON.stringify(seen));
  write(`DONE ${peakRssKib()} ${(cpuSeconds() - cpuAtGo).toFixed(6)}`);
  process.exit(0);
}

async function nextCommand(lines) {
  for (;;) {
    const { value, done } = await lines.next();
    if (done) return "STOP";
    const command = value.trim();
    if (command === "GO" || command === "STOP") return command;
  }
}

function monotonicNs() {
  return Number(process.hrtime.bigint()); // < 2**53 for 104 days of uptime
}

/**
 * Answer the harness's JSON requests with the methods of `client` until stdin closes. Two
 * requests are this module's: "enqueue_one" answers with the monotonic ns at which the
 * peer's add returned (the latency phase's submit time), and "enqueue_all" {bodies, batch}
 * submits them one at a time (batch null) or batch per call here and answers with the
 * seconds it took, so neither figure carries the pipe's round trip.
 */
export async function serveClient(client) {
  const ops = {
    ...client,
    async enqueue_one(args) {
      await client.enqueue_one(args);
      return monotonicNs();
    },
    async enqueue_all({ bodies, batch }) {
      const started = process.hrtime.bigint();
      if (batch == null) {
        for (const body of bodies) await client.enqueue_one({ body });
      } else {
        for (let start = 0; start < bodies.length; start += batch) {
          await client.enqueue_many({ bodies: bodies.slice(start, start + batch) });
        }
      }
      return Number(process.hrtime.bigint() - started) / 1e9;
    },
  };
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const { op, ...args } = JSON.parse(line);
    try {
      if (typeof ops[op] !== "function") throw new Error(`unknown op ${op}`);
      const value = await ops[op](args);
      write(JSON.stringify({ value: value ?? null }));
    } catch (error) {
      write(JSON.stringify({ error: String(error?.stack ?? error) }));
    }
  }
  await client.close();
  process.exit(0);
}
