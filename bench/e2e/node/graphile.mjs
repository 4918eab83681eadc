// graphile-worker as its documentation deploys it: WorkerUtils (makeWorkerUtils, addJob and
// addJobs) to add jobs, run() with a taskList and a preset as the worker.
//
// "graphile_worker": the documented defaults, with concurrentJobs set to the harness's
// concurrency. "graphile_worker_batched": the same plus the batching the performance page
// (worker.graphile.org/docs/performance) runs with: localQueue { size: 500 },
// completeJobBatchDelay: 0, failJobBatchDelay: 0.
//
// Jobs have no queue_name: graphile-worker runs jobs of one named queue one at a time, the
// other systems' queues run them in parallel. A successful job is deleted, so the admin side
// counts completions as the jobs added since the reset minus the jobs left.

import { makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";

const TASK = "noop";
const SCHEMA = "graphile_worker";

const BATCHING = {
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

export async function makeClient(url) {
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
  let added = 0;
  const query = (sql) => utils.withPgClient((client) => client.query(sql));
  const left = async () =>
    Number((await query(`SELECT count(*) AS n FROM ${SCHEMA}._private_jobs`)).rows[0].n);
  return {
    async reset() {
      await query(`TRUNCATE ${SCHEMA}._private_jobs, ${SCHEMA}._private_job_queues`);
      added = 0;
    },
    async enqueue_one({ body }) {
      await utils.addJob(TASK, body);
      added += 1;
    },
    async enqueue_many({ bodies }) {
      await utils.addJobs(bodies.map((payload) => ({ identifier: TASK, payload })));
      added += bodies.length;
    },
    async completed() {
      return added - (await left());
    },
    async last_completion() {
      return null; // graphile-worker keeps no record of a completed job
    },
    async state() {
      const problems = [];
      const failed = await query(
        `SELECT count(*) AS n FROM ${SCHEMA}._private_jobs WHERE attempts > 0`,
      );
      const remaining = await left();
      if (remaining) {
        problems.push(`${remaining} jobs left (${failed.rows[0].n} of them attempted)`);
      }
      return { added, problems };
    },
    async unlogged() {
      const rows = await query(
        "SELECT relname FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r'",
      );
      return rows.rows.map((r) => r.relname);
    },
    async close() {
      await utils.release();
    },
  };
}

export function workerFactory({ batched }) {
  return (url, { concurrency }) =>
    async (onStart) => {
      let pool;
      let runner;
      return {
        // Connect before GO, as the other systems do; run() then checks the schema, listens
        // and starts taking jobs. pg.Pool's default size (10) is graphile-worker's
        // maxPoolSize default.
        async open() {
          pool = new pg.Pool({ connectionString: url });
          await pool.query("SELECT 1");
        },
        async run() {
          runner = await run({
            pgPool: pool,
            preset: {
              worker: {
                connectionString: url,
                concurrentJobs: concurrency,
                ...(batched ? BATCHING : {}),
              },
            },
            noHandleSignals: true,
            taskList: {
              [TASK]: async (payload) => {
                onStart(payload);
              },
            },
          });
        },
        async stop() {
          if (runner) await runner.stop();
          await pool.end();
        },
      };
    };
}
