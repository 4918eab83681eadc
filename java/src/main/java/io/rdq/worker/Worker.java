package io.rdq.worker;

import io.rdq.Attempt;
import io.rdq.Claimed;
import io.rdq.Envelope;
import io.rdq.Limits;
import io.rdq.NotFoundException;
import io.rdq.Outcome;
import io.rdq.StaleClaimException;
import io.rdq.Storage;
import io.rdq.StorageException;
import io.rdq.ValidationException;
import java.lang.System.Logger.Level;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A minimal rdq worker for Java handlers: it claims tasks of its queues, runs the handler
 * registered under each task's {@code handler_ref}, extends the lease while the handler runs
 * and records the outcome with the claim's fencing token, deciding retries, backoff and
 * dead-lettering as rdq's Python engine does. Its attempt records are the same as the Python
 * engine's, so rdq's Python tools (CLI, web UI) list, show and redrive what it dead-letters.
 *
 * <pre>{@code
 * Worker worker = Worker.builder(storage)
 *         .queue("billing", QueueSettings.DEFAULTS.withMaxAttempts(3))
 *         .handler("billing.charge", task -> charge(task.payload(Charge.class)))
 *         .build();
 * worker.run();              // until worker.stop(), e.g. from a shutdown hook
 * }</pre>
 */
public final class Worker {
    private static final System.Logger LOG = System.getLogger("rdq.worker");

    /** Told what the worker does; every method is optional. Called from worker threads. */
    public interface Listener {
        default void claimed(Claimed claimed) {}

        /** An attempt was recorded: completed, rescheduled or dead-lettered. */
        default void recorded(Envelope task, Attempt attempt) {}

        /** The lease was lost ({@code stage} "heartbeat" or the resolution's name): another
         * worker may hold the task; this attempt's outcome was not recorded. */
        default void staleClaim(Envelope task, String stage) {}
    }

    private final Storage storage;
    private final String workerId;
    private final Map<String, QueueSettings> queues;
    private final Map<String, Handler> handlers;
    private final Duration pollMin;
    private final Duration pollMax;
    private final Duration gracePeriod;
    private final Listener listener;
    private final StorageClock clock = new StorageClock();
    private final ExecutorService runs = Executors.newCachedThreadPool(daemon("rdq-run"));
    private final ExecutorService handlerThreads = Executors.newCachedThreadPool(daemon("rdq-handler"));
    private final ScheduledExecutorService heartbeats = Executors.newSingleThreadScheduledExecutor(daemon("rdq-heartbeat"));
    private final Map<String, AtomicInteger> running = new ConcurrentHashMap<>();
    private final Map<String, Run> active = new ConcurrentHashMap<>();
    private final AtomicBoolean stopping = new AtomicBoolean();
    private final CountDownLatch stopped = new CountDownLatch(1);
    private final Object wake = new Object();

    private Worker(Builder b) {
        this.storage = b.storage;
        this.workerId = b.workerId != null ? b.workerId : defaultWorkerId();
        Limits.checkWorkerId(workerId, "worker_id");
        this.queues = Map.copyOf(b.queues);
        this.handlers = Map.copyOf(b.handlers);
        this.pollMin = b.pollMin;
        this.pollMax = b.pollMax;
        this.gracePeriod = b.gracePeriod;
        this.listener = b.listener;
        if (queues.isEmpty()) {
            throw new io.rdq.ConfigException("queues", "give the worker at least one queue");
        }
        for (var queue : queues.entrySet()) {
            if (!queue.getValue().keepSucceeded() && !storage.capabilities().discardSucceeded()) {
                throw new io.rdq.ConfigException("queues." + queue.getKey() + ".keep_succeeded",
                        "the store does not offer discardSucceeded: queue " + queue.getKey()
                                + " with keepSucceeded false cannot be served from it");
            }
        }
    }

    public static Builder builder(Storage storage) {
        return new Builder(storage);
    }

    public String workerId() {
        return workerId;
    }

    /** {@code host:pid}, like the Python worker's default id. */
    public static String defaultWorkerId() {
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            host = "java";
        }
        return "java-" + host + ":" + ProcessHandle.current().pid();
    }

    /** Ask the worker to stop: no more claims; running handlers get the grace period, then
     * are interrupted and their tasks rescheduled as INTERRUPTED. Safe from any thread. */
    public void stop() {
        if (stopping.compareAndSet(false, true)) {
            synchronized (wake) {
                wake.notifyAll();
            }
        }
    }

    /** Block until {@link #run()} has returned (or {@code timeout} passes). */
    public boolean awaitStopped(Duration timeout) throws InterruptedException {
        return stopped.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    /** Claim and run tasks until {@link #stop()}; then finish or interrupt what runs. */
    public void run() {
        LOG.log(Level.INFO, "worker {0} started on {1}", workerId, queues.keySet());
        try {
            long idleNanos = pollMin.toNanos();
            while (!stopping.get()) {
                int claimed = 0;
                for (var queue : queues.entrySet()) {
                    claimed += claim(queue.getKey(), queue.getValue());
                }
                if (claimed > 0) {
                    idleNanos = pollMin.toNanos();
                    continue;
                }
                synchronized (wake) {
                    if (!stopping.get()) {
                        wake.wait(Math.max(1, idleNanos / 1_000_000));
                    }
                }
                idleNanos = Math.min(pollMax.toNanos(), idleNanos * 2);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            shutDown();
            LOG.log(Level.INFO, "worker {0} stopped", workerId);
            stopped.countDown();
        }
    }

    private int claim(String queue, QueueSettings settings) {
        AtomicInteger busy = running.computeIfAbsent(queue, q -> new AtomicInteger());
        int free = settings.concurrency() - busy.get();
        if (free <= 0) {
            return 0;
        }
        List<Claimed> claimed;
        long sent = System.nanoTime();
        try {
            claimed = storage.claimDue(queue, Math.min(free, Limits.MAX_LIMIT), settings.lease(), workerId);
        } catch (StorageException e) {
            LOG.log(Level.WARNING, "claim on {0} failed: {1}", queue, e.getMessage());
            return 0;
        }
        long received = System.nanoTime();
        for (Claimed c : claimed) {
            clock.observeClaim(c.task().leaseExpiresAt(), settings.lease(), sent, received);
            busy.incrementAndGet();
            Run run = new Run(c, settings);
            active.put(c.token(), run);
            listener.claimed(c);
            runs.execute(() -> {
                try {
                    execute(run);
                } finally {
                    active.remove(c.token());
                    busy.decrementAndGet();
                    synchronized (wake) {
                        wake.notifyAll();
                    }
                }
            });
        }
        return claimed.size();
    }

    /** One claimed task while this worker holds it. */
    private static final class Run {
        final Claimed claimed;
        final QueueSettings queueSettings;
        final AtomicBoolean lost = new AtomicBoolean();
        final AtomicBoolean interrupted = new AtomicBoolean();
        volatile Future<?> handler;

        Run(Claimed claimed, QueueSettings queueSettings) {
            this.claimed = claimed;
            this.queueSettings = queueSettings;
        }
    }

    private void execute(Run run) {
        Envelope task = run.claimed.task();
        int number = task.attemptCount() + 1;
        int used = number - interruptedSinceRedrive(task);
        Instant started = clock.now();
        QueueSettings settings = run.queueSettings.resolve(task.retry());
        if (task.corrupt() != null) {
            finish(run, number, started, Decision.deadLetter(Decision.CORRUPT_TASK, "the stored task does not decode: " + task.corrupt()));
            return;
        }
        if (used > settings.maxAttempts()) {
            String last = task.attempts().isEmpty() ? "unknown" : task.attempts().get(task.attempts().size() - 1).outcome().name();
            finish(run, number, started, Decision.deadLetter(Decision.ATTEMPTS_EXHAUSTED, (used - 1)
                    + " attempts used (last: " + last + ") before this claim; max_attempts is " + settings.maxAttempts()));
            return;
        }
        Handler handler = handlers.get(task.handlerRef());
        if (handler == null) {
            finish(run, number, started, Decision.deadLetter(Decision.UNKNOWN_HANDLER,
                    "no handler for '" + task.handlerRef() + "' (not registered with this Java worker)"));
            return;
        }
        Decision decision = call(run, handler, new TaskContext(task, number, workerId), settings, used);
        if (decision != null) {
            finish(run, number, started, decision);
        }
    }

    /** Run the handler under its timeout, heartbeating; null when the lease was lost. */
    private Decision call(Run run, Handler handler, TaskContext ctx, QueueSettings settings, int used) {
        Claimed claimed = run.claimed;
        long every = settings.heartbeat().toNanos();
        ScheduledFuture<?> beat = heartbeats.scheduleAtFixedRate(() -> heartbeat(run, settings), every, every, TimeUnit.NANOSECONDS);
        Future<?> future = handlerThreads.submit(() -> {
            handler.handle(ctx);
            return null;
        });
        run.handler = future;
        try {
            future.get(settings.timeout().toNanos(), TimeUnit.NANOSECONDS);
            return run.lost.get() ? null : Decision.SUCCESS;
        } catch (TimeoutException e) {
            future.cancel(true);
            return run.lost.get() ? null : Decision.timedOut(used, settings, ThreadLocalRandom.current());
        } catch (CancellationException e) {
            if (run.lost.get()) {
                return null;
            }
            return run.interrupted.get() ? Decision.interrupted() : Decision.timedOut(used, settings, ThreadLocalRandom.current());
        } catch (ExecutionException e) {
            return run.lost.get() ? null : Decision.failed(e.getCause(), used, settings, ThreadLocalRandom.current());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            future.cancel(true);
            return run.lost.get() ? null : Decision.interrupted();
        } finally {
            beat.cancel(false);
            LOG.log(Level.DEBUG, "handler of {0} done", claimed.task().id());
        }
    }

    private void heartbeat(Run run, QueueSettings settings) {
        Claimed claimed = run.claimed;
        try {
            storage.extendLease(claimed.task().id(), claimed.token(), settings.lease());
        } catch (StaleClaimException | NotFoundException e) {
            if (run.lost.compareAndSet(false, true)) {
                LOG.log(Level.WARNING, "lease of {0} lost: {1}", claimed.task().id(), e.getMessage());
                listener.staleClaim(claimed.task(), "heartbeat");
                Future<?> handler = run.handler;
                if (handler != null) {
                    handler.cancel(true);
                }
            }
        } catch (StorageException e) {
            // an outage: the next beat tries again, and the lease may still be renewed in time
            LOG.log(Level.WARNING, "heartbeat of {0} failed: {1}", claimed.task().id(), e.getMessage());
        }
    }

    /** Write the attempt and the decision, retrying through storage outages until the lease
     * is surely gone (then another worker reclaims the task). */
    private void finish(Run run, int number, Instant started, Decision decision) {
        Envelope task = run.claimed.task();
        String token = run.claimed.token();
        Attempt attempt = new Attempt(number, decision.outcome(), decision.errorType(), decision.errorMessage(),
                started, clock.now(), workerId, decision.traceback());
        long deadline = System.nanoTime() + 2 * run.queueSettings.lease().toNanos();
        long pause = 50;
        while (true) {
            try {
                switch (decision.action()) {
                    case COMPLETE -> {
                        if (run.queueSettings.keepSucceeded()) {
                            storage.complete(task.id(), token, attempt);
                        } else {
                            storage.complete(task.id(), token, attempt, true);
                        }
                    }
                    case DEAD_LETTER -> storage.deadLetter(task.id(), token, attempt);
                    case RESCHEDULE -> storage.reschedule(task.id(), token, attempt,
                            clock.now().plusNanos((long) (decision.delay() * 1e9)));
                }
                listener.recorded(task, attempt);
                LOG.log(decision.action() == Decision.Action.DEAD_LETTER ? Level.WARNING : Level.DEBUG,
                        "task {0} attempt {1}: {2}", task.id(), number, decision.outcome());
                return;
            } catch (StaleClaimException e) {
                LOG.log(Level.WARNING, "stale claim on {0}: the lease was lost, outcome not recorded", task.id());
                listener.staleClaim(task, decision.action().name().toLowerCase());
                return;
            } catch (NotFoundException e) {
                LOG.log(Level.WARNING, "task {0} vanished while running (purged?)", task.id());
                return;
            } catch (ValidationException e) {
                LOG.log(Level.ERROR, "storage rejected the outcome of {0}: {1}", task.id(), e.getMessage());
                return;
            } catch (StorageException e) {
                if (System.nanoTime() + pause * 1_000_000 > deadline || run.lost.get()) {
                    LOG.log(Level.ERROR, "could not record the outcome of {0}; the task will be reclaimed", task.id());
                    return;
                }
                try {
                    Thread.sleep(pause);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                    return;
                }
                pause = Math.min(pause * 2, 5000);
            }
        }
    }

    private void shutDown() {
        long deadline = System.nanoTime() + gracePeriod.toNanos();
        while (!active.isEmpty() && System.nanoTime() < deadline) {
            synchronized (wake) {
                try {
                    wake.wait(50);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        for (Run run : new ArrayList<>(active.values())) {
            run.interrupted.set(true);
            Future<?> handler = run.handler;
            if (handler != null) {
                handler.cancel(true);
            }
        }
        runs.shutdown();
        try {
            runs.awaitTermination(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        heartbeats.shutdownNow();
        handlerThreads.shutdownNow();
    }

    /** INTERRUPTED attempts since the last redrive: a graceful shutdown does not use up one of
     * the task's attempts. */
    private static int interruptedSinceRedrive(Envelope task) {
        int count = task.attemptCount();
        List<Attempt> attempts = task.attempts();
        if (count == 0 || attempts.isEmpty()) {
            return 0;
        }
        List<Attempt> recent = attempts.subList(Math.max(0, attempts.size() - count), attempts.size());
        return (int) recent.stream().filter(a -> a.outcome() == Outcome.INTERRUPTED).count();
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return runnable -> {
            Thread thread = new Thread(runnable, name);
            thread.setDaemon(true);
            return thread;
        };
    }

    /** Builds a worker: its storage (connected), queues with their settings, and handlers. */
    public static final class Builder {
        private final Storage storage;
        private String workerId;
        private final Map<String, QueueSettings> queues = new LinkedHashMap<>();
        private final Map<String, Handler> handlers = new LinkedHashMap<>();
        private Duration pollMin = Duration.ofMillis(50);
        private Duration pollMax = Duration.ofSeconds(2);
        private Duration gracePeriod = Duration.ofSeconds(30);
        private Listener listener = new Listener() {};

        private Builder(Storage storage) {
            this.storage = storage;
        }

        public Builder workerId(String value) {
            workerId = value;
            return this;
        }

        /** Work on {@code name} with {@code settings}. */
        public Builder queue(String name, QueueSettings settings) {
            Limits.checkQueue(name, "queue");
            queues.put(name, settings);
            return this;
        }

        /** Run tasks whose {@code handler_ref} is {@code ref} with {@code handler}. */
        public Builder handler(String ref, Handler handler) {
            Limits.checkTask(Envelope.of("x", "q", ref, null));
            handlers.put(ref, handler);
            return this;
        }

        /** How often an idle worker looks for due tasks: from {@code min}, doubling to {@code max}. */
        public Builder poll(Duration min, Duration max) {
            pollMin = min;
            pollMax = max;
            return this;
        }

        public Builder gracePeriod(Duration value) {
            gracePeriod = value;
            return this;
        }

        public Builder listener(Listener value) {
            listener = value;
            return this;
        }

        public Worker build() {
            return new Worker(this);
        }
    }
}
