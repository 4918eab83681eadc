// BullMQ as its documentation deploys it: a Queue (add, addBulk) to add jobs and a Worker with
// the harness's concurrency (docs.bullmq.io/guide/workers/concurrency), on Redis (the default
// backend) or on PostgreSQL (createPostgresBackend, docs.bullmq.io/guide/postgresql), the same
// API on both. Job options are BullMQ's defaults: one attempt, completed jobs kept (their
// finishedOn times give the drain's end, and verification reads them back).

import { Queue, Worker, createPostgresBackend } from "bullmq";

const QUEUE = "bench";
const TASK = "noop";
const PAGE = 10_000;
const STATES = ["waiting", "active", "delayed", "prioritized", "paused", "failed", "waiting-children"];

/**
 * The constructor arguments after the queue name for `url` (redis:// or postgresql://). On
 * PostgreSQL the producer, which opens first, creates the schema (`migrate: true`, as the guide
 * has it for a deployment whose producer owns the schema); the workers only check it.
 */
function connection(url, { migrate = false } = {}) {
  if (url.startsWith("redis:")) {
    const { hostname, port } = new URL(url);
    return [{ connection: { host: hostname, port: Number(port) } }];
  }
  return [{ connection: { connectionString: url, migrate } }, createPostgresBackend];
}

export async function makeClient(url) {
  const queue = new Queue(QUEUE, ...connection(url, { migrate: true }));
  await queue.waitUntilReady();
  return {
    async reset() {
      await queue.obliterate({ force: true });
    },
    async enqueue_one({ body }) {
      await queue.add(TASK, body);
    },
    async enqueue_many({ bodies }) {
      await queue.addBulk(bodies.map((data) => ({ name: TASK, data })));
    },
    async completed() {
      return await queue.getCompletedCount();
    },
    async last_completion() {
      const [last] = await queue.getCompleted(0, 0);
      return last ? last.finishedOn : null;
    },
    async state() {
      const problems = [];
      const counts = await queue.getJobCounts(...STATES);
      for (const [state, count] of Object.entries(counts)) {
        if (count) problems.push(`${count} jobs ${state}`);
      }
      let completed = 0;
      let again = 0;
      for (let start = 0; ; start += PAGE) {
        const page = await queue.getCompleted(start, start + PAGE - 1);
        completed += page.length;
        again += page.filter((job) => job.attemptsMade !== 1 || job.attemptsStarted > 1).length;
        if (page.length < PAGE) break;
      }
      if (again) problems.push(`${again} completed jobs ran more than once`);
      const others = Object.values(counts).reduce((a, b) => a + b, 0);
      return { added: completed + others, problems };
    },
    async unlogged() {
      if (url.startsWith("redis:")) return [];
      const { default: pg } = await import("pg");
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const rows = await client.query(
          "SELECT relname FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r'",
        );
        return rows.rows.map((r) => r.relname);
      } finally {
        await client.end();
      }
    },
    async close() {
      await queue.close();
    },
  };
}

export function workerFactory() {
  return (url, { concurrency }) =>
    async (onStart) => {
      const [options, backend] = connection(url);
      const worker = new Worker(
        QUEUE,
        async (job) => {
          onStart(job.data);
        },
        { ...options, concurrency, autorun: false },
        ...(backend ? [backend] : []),
      );
      let running;
      return {
        async open() {
          await worker.waitUntilReady();
        },
        async run() {
          running = worker.run();
        },
        async stop() {
          await worker.close();
          await running;
        },
      };
    };
}
