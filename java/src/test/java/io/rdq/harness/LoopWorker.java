package io.rdq.harness;

import io.rdq.Attempt;
import io.rdq.Claimed;
import io.rdq.Envelope;
import io.rdq.postgres.PostgresStorage;
import io.rdq.worker.Backoff;
import io.rdq.worker.QueueSettings;
import io.rdq.worker.Worker;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * A Java worker for the cross-language tests: {@code LoopWorker URL QUEUE MODE WORKER_ID
 * LEASE_S HEARTBEAT_S [CONCURRENCY]}. Handlers: {@code billing.charge} fails ({@code MODE=failing}) or
 * succeeds ({@code MODE=fixed}); {@code billing.slow} waits until the file named by its
 * payload's {@code release} exists. Queue settings: 3 attempts, a fixed 50 ms backoff. Every
 * claim, recorded attempt and lost lease is printed as one line; SIGTERM stops it gracefully.
 */
public final class LoopWorker {
    private LoopWorker() {}

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String queue = args[1];
        boolean failing = args[2].equals("failing");
        String workerId = args[3];
        Duration lease = Duration.ofMillis((long) (Double.parseDouble(args[4]) * 1000));
        Duration heartbeat = Duration.ofMillis((long) (Double.parseDouble(args[5]) * 1000));
        PostgresStorage storage = PostgresStorage.fromUrl(url);
        storage.connect();
        QueueSettings settings = QueueSettings.DEFAULTS.withMaxAttempts(3).withBackoff(Backoff.fixed(0.05))
                .withLease(lease).withHeartbeat(heartbeat).withTimeout(Duration.ofSeconds(30));
        if (args.length > 6) {
            settings = settings.withConcurrency(Integer.parseInt(args[6]));
        }
        Worker worker = Worker.builder(storage)
                .workerId(workerId)
                .queue(queue, settings)
                .poll(Duration.ofMillis(20), Duration.ofMillis(200))
                .gracePeriod(Duration.ofSeconds(5))
                .handler("billing.charge", task -> {
                    if (failing) {
                        throw new IllegalStateException("card processor down (order " + task.payload(java.util.Map.class).get("order") + ")");
                    }
                })
                .handler("billing.slow", task -> {
                    Path release = Path.of(task.payload().tree().get("release").asText());
                    while (!Files.exists(release)) {
                        Thread.sleep(20);
                    }
                })
                .listener(new Worker.Listener() {
                    @Override
                    public void claimed(Claimed claimed) {
                        say("claimed " + claimed.task().id() + " " + claimed.token());
                    }

                    @Override
                    public void recorded(Envelope task, Attempt attempt) {
                        say("recorded " + task.id() + " " + attempt.number() + " " + attempt.outcome());
                    }

                    @Override
                    public void staleClaim(Envelope task, String stage) {
                        say("stale " + task.id() + " " + stage);
                    }
                })
                .build();
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            worker.stop();
            try {
                worker.awaitStopped(Duration.ofSeconds(20));
                main.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        say("ready " + worker.workerId());
        worker.run();
        storage.close();
        say("stopped");
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
