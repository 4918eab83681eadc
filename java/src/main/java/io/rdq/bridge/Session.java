package io.rdq.bridge;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonToken;
import io.rdq.AuditEntry;
import io.rdq.Capabilities;
import io.rdq.ConfigException;
import io.rdq.Control;
import io.rdq.ControlConflictException;
import io.rdq.Counts;
import io.rdq.DlqGroup;
import io.rdq.Envelope;
import io.rdq.Admitted;
import io.rdq.DedupConflictException;
import io.rdq.IdConflictException;
import io.rdq.NotConnectedException;
import io.rdq.NotFoundException;
import io.rdq.Page;
import io.rdq.RdqException;
import io.rdq.StaleClaimException;
import io.rdq.StaleCursorException;
import io.rdq.Stats;
import io.rdq.Storage;
import io.rdq.StorageException;
import io.rdq.StorageUnavailableException;
import io.rdq.ValidationException;
import io.rdq.WorkerInfo;
import io.rdq.json.EnvelopeJson;
import io.rdq.json.EnvelopeJson.JsonReader;
import io.rdq.json.Times;
import io.rdq.postgres.PostgresStorage;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ExecutorService;

/**
 * One client of the bridge: a stream of JSON lines, each a request
 * {@code {"id": 7, "op": "claim_due", "args": {...}}} answered by one line
 * {@code {"id": 7, "ok": ...}} or {@code {"id": 7, "error": {"kind": "StaleClaim", ...}}}.
 * The first request opens the store ({@code "open"}, args {@code {"url": ...}}); requests run
 * concurrently and answers may come in any order. When the stream ends the store is closed.
 *
 * <p>The session translates and nothing else: every argument goes to the {@link Storage}
 * operation of the same name, every answer or exception comes back as it was.
 */
final class Session implements Runnable {
    private final InputStream in;
    private final Writer out;
    private final ExecutorService pool;
    private volatile Storage storage;

    Session(InputStream in, OutputStream out, ExecutorService pool) {
        this.in = in;
        this.out = new java.io.BufferedWriter(new java.io.OutputStreamWriter(out, StandardCharsets.UTF_8));
        this.pool = pool;
    }

    @Override
    public void run() {
        try (BufferedReader lines = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = lines.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                String request = line;
                pool.execute(() -> handle(request));
            }
        } catch (IOException e) {
            // the client went away
        } finally {
            Storage open = storage;
            if (open != null) {
                open.close();
            }
        }
    }

    private void handle(String line) {
        long id = -1;
        try {
            String op = null;
            Args args = null;
            try (JsonReader r = new JsonReader(line)) {
                if (r.next() != JsonToken.START_OBJECT) {
                    throw new ValidationException("request", "must be an object");
                }
                while (r.next() == JsonToken.FIELD_NAME) {
                    String name = r.name();
                    r.next();
                    switch (name) {
                        case "id" -> id = r.longValue("id");
                        case "op" -> op = r.string("op");
                        case "args" -> args = Args.read(r);
                        default -> r.skip();
                    }
                }
            }
            if (op == null) {
                throw new ValidationException("op", "missing");
            }
            Args given = args == null ? Args.read(emptyArgs()) : args;
            String opName = op;
            String result = EnvelopeJson.write(g -> call(opName, given, g));
            reply(id, "\"ok\":" + result);
        } catch (RuntimeException e) {
            reply(id, "\"error\":" + EnvelopeJson.write(g -> error(g, e)));
        }
    }

    private static JsonReader emptyArgs() {
        JsonReader r = new JsonReader("null");
        r.next();
        return r;
    }

    private synchronized void reply(long id, String body) {
        try {
            out.write("{\"id\":" + id + "," + body + "}\n");
            out.flush();
        } catch (IOException e) {
            // the client went away; its requests no longer matter
        }
    }

    private Storage store() {
        Storage open = storage;
        if (open == null) {
            throw new IllegalStateException("the first request must be \"open\"");
        }
        return open;
    }

    /** Runs {@code op} and writes its result. */
    private void call(String op, Args a, JsonGenerator g) throws IOException {
        switch (op) {
            case "open" -> {
                synchronized (this) {
                    if (storage != null) {
                        throw new IllegalStateException("the store is already open");
                    }
                    storage = PostgresStorage.fromUrl(a.string("url"));
                }
                g.writeNull();
            }
            case "connect" -> {
                store().connect();
                g.writeNull();
            }
            case "close" -> {
                store().close();
                g.writeNull();
            }
            case "migrate" -> {
                g.writeStartArray();
                for (String step : store().migrate()) {
                    g.writeString(step);
                }
                g.writeEndArray();
            }
            case "capabilities" -> capabilities(g, store().capabilities());
            case "enqueue" -> g.writeBoolean(store().enqueue(a.envelope("task"), a.optionalDuration("delay")));
            case "enqueue_batch" -> booleans(g, store().enqueueBatch(a.envelopes("tasks"), a.optionalDuration("delay")));
            case "claim_due" -> {
                var claimed = store().claimDue(a.string("queue"), a.integer("limit"), a.duration("lease"), a.optionalString("worker_id"));
                g.writeStartArray();
                for (var c : claimed) {
                    g.writeStartObject();
                    g.writeFieldName("task");
                    EnvelopeJson.write(g, c.task());
                    g.writeStringField("token", c.token());
                    g.writeEndObject();
                }
                g.writeEndArray();
            }
            case "extend_lease" -> g.writeString(Times.format(
                    store().extendLease(a.string("task_id"), a.string("token"), a.duration("lease"))));
            case "reschedule" -> {
                store().reschedule(a.string("task_id"), a.string("token"), a.attempt("attempt"), a.instant("next_at"));
                g.writeNull();
            }
            case "complete" -> {
                store().complete(a.string("task_id"), a.string("token"), a.attempt("attempt"),
                        a.optionalBool("discard"));
                g.writeNull();
            }
            case "dead_letter" -> {
                store().deadLetter(a.string("task_id"), a.string("token"), a.attempt("attempt"));
                g.writeNull();
            }
            case "complete_many" -> {
                g.writeStartArray();
                for (StorageException e : store().completeMany(a.completions("completions"))) {
                    if (e == null) {
                        g.writeNull();
                    } else {
                        error(g, e);
                    }
                }
                g.writeEndArray();
            }
            case "dlq_list" -> envelopes(g, store().dlqList(a.string("queue"), a.dlqFilter("filter"), a.page("page")));
            case "list_tasks" -> envelopes(g, store().listTasks(a.string("queue"), a.taskFilter("filter"), a.page("page")));
            case "get" -> EnvelopeJson.write(g, store().get(a.string("task_id")));
            case "redrive" -> g.writeNumber(store().redrive(a.string("queue"), a.selector("selector")));
            case "purge" -> g.writeNumber(store().purge(a.string("queue"), a.selector("selector")));
            case "cancel" -> g.writeNumber(store().cancel(a.string("queue"), a.strings("task_ids")));
            case "dlq_groups" -> {
                g.writeStartArray();
                for (DlqGroup group : store().dlqGroups(a.string("queue"))) {
                    g.writeStartObject();
                    g.writeStringField("handler_ref", group.handlerRef());
                    EnvelopeJson.text(g, "error_type", group.errorType());
                    g.writeNumberField("count", group.count());
                    EnvelopeJson.time(g, "first_dead_lettered_at", group.firstDeadLetteredAt());
                    EnvelopeJson.time(g, "last_dead_lettered_at", group.lastDeadLetteredAt());
                    g.writeEndObject();
                }
                g.writeEndArray();
            }
            case "list_queues" -> {
                g.writeStartArray();
                for (Stats s : store().listQueues()) {
                    stats(g, s);
                }
                g.writeEndArray();
            }
            case "import_tasks" -> booleans(g, store().importTasks(a.envelopes("tasks")));
            case "append_audit" -> audit(g, store().appendAudit(a.auditEntry("entry")));
            case "list_audit" -> {
                Page<AuditEntry> page = store().listAudit(a.auditFilter("filter"), a.page("page"));
                g.writeStartObject();
                g.writeFieldName("items");
                g.writeStartArray();
                for (AuditEntry entry : page.items()) {
                    audit(g, entry);
                }
                g.writeEndArray();
                EnvelopeJson.text(g, "cursor", page.nextCursor());
                g.writeEndObject();
            }
            case "now" -> g.writeString(Times.format(store().now()));
            case "stats" -> stats(g, store().stats(a.string("queue")));
            case "purge_succeeded" -> g.writeNumber(store().purgeSucceeded(a.string("queue"), a.instant("older_than")));
            case "admit" -> {
                Admitted admitted = store().admit(a.envelope("task"), a.dedup("dedup"), a.optionalDuration("delay"));
                g.writeStartObject();
                g.writeStringField("outcome", admitted.outcome());
                g.writeStringField("task_id", admitted.taskId());
                g.writeStringField("queue", admitted.queue());
                g.writeEndObject();
            }
            case "expire_tasks" -> g.writeNumber(store().expireTasks(a.string("queue"), a.strings("ids"), a.instant("before")));
            case "held_payload_refs" -> {
                g.writeStartArray();
                for (String ref : new java.util.TreeSet<>(store().heldPayloadRefs(a.strings("refs")))) {
                    g.writeString(ref);
                }
                g.writeEndArray();
            }
            case "wait_due" -> {
                double seconds = a.number("timeout");
                if (!(seconds >= 0) || Double.isInfinite(seconds)) {
                    throw new ValidationException("timeout", "must be a non-negative number of seconds");
                }
                g.writeBoolean(store().waitDue(a.string("queue"), java.time.Duration.ofNanos((long) (seconds * 1e9))));
            }
            case "list_controls" -> {
                g.writeStartArray();
                for (Control c : store().listControls(a.optionalString("queue"))) {
                    control(g, c);
                }
                g.writeEndArray();
            }
            case "put_control" -> control(g, store().putControl(a.control("control"), a.longValue("expected_version")));
            case "delete_control" -> g.writeBoolean(store().deleteControl(a.string("queue"), a.string("key"),
                    a.longValue("expected_version")));
            case "retry_now" -> g.writeNumber(store().retryNow(a.string("queue"), a.strings("task_ids")));
            case "heartbeat_worker" -> worker(g, store().heartbeatWorker(a.workerInfo("info")));
            case "list_workers" -> {
                g.writeStartArray();
                for (WorkerInfo w : store().listWorkers()) {
                    worker(g, w);
                }
                g.writeEndArray();
            }
            case "remove_worker" -> g.writeBoolean(store().removeWorker(a.optionalString("worker_id")));
            case "purge_workers" -> g.writeNumber(store().purgeWorkers(a.optionalInstant("seen_before")));
            case "add_counts" -> {
                store().addCounts(a.counts("counts"));
                g.writeNull();
            }
            case "read_counts" -> {
                g.writeStartArray();
                for (Counts c : store().readCounts(a.optionalString("queue"), a.optionalInstant("since"))) {
                    g.writeStartObject();
                    g.writeStringField("queue", c.queue());
                    EnvelopeJson.time(g, "minute", c.minute());
                    g.writeNumberField("succeeded", c.succeeded());
                    g.writeNumberField("failed", c.failed());
                    g.writeNumberField("dead", c.dead());
                    g.writeNumberField("deferred", c.deferred());
                    g.writeEndObject();
                }
                g.writeEndArray();
            }
            case "purge_counts" -> g.writeNumber(store().purgeCounts(a.optionalInstant("before")));
            default -> throw new UnsupportedOperationException("unknown operation " + op);
        }
    }

    private static void booleans(JsonGenerator g, List<Boolean> flags) throws IOException {
        g.writeStartArray();
        for (Boolean flag : flags) {
            g.writeBoolean(flag);
        }
        g.writeEndArray();
    }

    private static void envelopes(JsonGenerator g, Page<Envelope> page) throws IOException {
        g.writeStartObject();
        g.writeFieldName("items");
        g.writeStartArray();
        for (Envelope task : page.items()) {
            EnvelopeJson.write(g, task);
        }
        g.writeEndArray();
        EnvelopeJson.text(g, "cursor", page.nextCursor());
        g.writeEndObject();
    }

    private static void capabilities(JsonGenerator g, Capabilities c) throws IOException {
        g.writeStartObject();
        g.writeNumberField("contract_version", c.contractVersion());
        g.writeBooleanField("notify", c.notifications());
        g.writeBooleanField("filter_pushdown", c.filterPushdown());
        g.writeBooleanField("batch_enqueue", c.batchEnqueue());
        g.writeBooleanField("batch_complete", c.batchComplete());
        g.writeBooleanField("group_pushdown", c.groupPushdown());
        g.writeBooleanField("priorities", c.priorities());
        g.writeBooleanField("claim_holder", c.claimHolder());
        g.writeBooleanField("cancel", c.cancel());
        g.writeBooleanField("task_listing", c.taskListing());
        g.writeBooleanField("queue_listing", c.queueListing());
        g.writeBooleanField("import_tasks", c.importTasks());
        g.writeBooleanField("audit", c.audit());
        g.writeBooleanField("control", c.control());
        g.writeBooleanField("worker_registry", c.workerRegistry());
        g.writeBooleanField("counters", c.counters());
        g.writeBooleanField("fair_shares", c.fairShares());
        g.writeBooleanField("priority_aging", c.priorityAging());
        g.writeBooleanField("retention", c.retention());
        g.writeBooleanField("dedup", c.dedup());
        g.writeBooleanField("payload_refs", c.payloadRefs());
        g.writeBooleanField("discard_succeeded", c.discardSucceeded());
        g.writeEndObject();
    }

    private static void nullableNumber(JsonGenerator g, String name, Long value) throws IOException {
        if (value == null) {
            g.writeNullField(name);
        } else {
            g.writeNumberField(name, value);
        }
    }

    static void control(JsonGenerator g, Control c) throws IOException {
        g.writeStartObject();
        g.writeStringField("queue", c.queue());
        g.writeStringField("key", c.key());
        g.writeBooleanField("paused", c.paused());
        nullableNumber(g, "gate", c.gate());
        nullableNumber(g, "concurrency", c.concurrency());
        nullableNumber(g, "rate", c.rate());
        g.writeNumberField("per", c.per());
        nullableNumber(g, "burst", c.burst());
        if (c.fair() == null) {
            g.writeNullField("fair");
        } else {
            g.writeStringField("fair", c.fair());
        }
        if (c.aging() == null) {
            g.writeNullField("aging");
        } else {
            g.writeNumberField("aging", c.aging());
        }
        g.writeFieldName("state");
        g.writeRawValue(c.state().text());
        g.writeNumberField("version", c.version());
        EnvelopeJson.time(g, "updated_at", c.updatedAt());
        nullableNumber(g, "in_use", c.inUse());
        g.writeEndObject();
    }

    private static void worker(JsonGenerator g, WorkerInfo w) throws IOException {
        g.writeStartObject();
        g.writeStringField("id", w.id());
        g.writeStringField("host", w.host());
        g.writeNumberField("pid", w.pid());
        g.writeStringField("version", w.version());
        g.writeFieldName("queues");
        g.writeStartArray();
        for (String queue : w.queues()) {
            g.writeString(queue);
        }
        g.writeEndArray();
        g.writeNumberField("concurrency", w.concurrency());
        g.writeNumberField("held", w.held());
        g.writeStringField("state", w.state());
        g.writeNumberField("heartbeat", w.heartbeat());
        EnvelopeJson.time(g, "started_at", w.startedAt());
        EnvelopeJson.time(g, "seen_at", w.seenAt());
        g.writeFieldName("extra");
        g.writeRawValue(w.extra().text());
        g.writeEndObject();
    }

    private static void stats(JsonGenerator g, Stats s) throws IOException {
        g.writeStartObject();
        g.writeStringField("queue", s.queue());
        g.writeNumberField("pending", s.pending());
        g.writeNumberField("in_flight", s.inFlight());
        g.writeNumberField("dlq_depth", s.dlqDepth());
        g.writeNumberField("succeeded", s.succeeded());
        if (s.oldestPendingAge() == null) {
            g.writeNullField("oldest_pending_age");
        } else {
            g.writeNumberField("oldest_pending_age", s.oldestPendingAge());
        }
        EnvelopeJson.time(g, "as_of", s.asOf());
        g.writeNumberField("cancelled", s.cancelled());
        g.writeFieldName("estimated");
        g.writeStartArray();
        for (String name : s.estimated()) {
            g.writeString(name);
        }
        g.writeEndArray();
        g.writeEndObject();
    }

    private static void audit(JsonGenerator g, AuditEntry e) throws IOException {
        g.writeStartObject();
        g.writeStringField("actor", e.actor());
        g.writeStringField("action", e.action());
        g.writeStringField("queue", e.queue());
        g.writeFieldName("selector");
        g.writeRawValue(e.selector() == null ? "{}" : e.selector().text());
        g.writeNumberField("count", e.count());
        EnvelopeJson.text(g, "reason", e.reason());
        EnvelopeJson.text(g, "error", e.error());
        EnvelopeJson.text(g, "id", e.id());
        Instant time = e.time();
        EnvelopeJson.time(g, "time", time);
        g.writeEndObject();
    }

    /** The wire form of an exception: its kind (the name of rdq's Python error) and data. */
    static void error(JsonGenerator g, RuntimeException e) throws IOException {
        g.writeStartObject();
        if (e instanceof ValidationException v) {
            g.writeStringField("kind", "ValidationError");
            EnvelopeJson.text(g, "field", v.field());
            g.writeStringField("message", v.reason());
        } else if (e instanceof ConfigException c) {
            g.writeStringField("kind", "ConfigError");
            EnvelopeJson.text(g, "key", c.key());
            g.writeStringField("message", c.reason());
        } else if (e instanceof StaleClaimException s) {
            g.writeStringField("kind", "StaleClaim");
            g.writeStringField("task_id", s.taskId());
        } else if (e instanceof NotFoundException n) {
            g.writeStringField("kind", "NotFound");
            g.writeStringField("task_id", n.taskId());
        } else if (e instanceof StaleCursorException s) {
            g.writeStringField("kind", "StaleCursor");
            g.writeStringField("reason", s.reason());
        } else if (e instanceof DedupConflictException c) {
            g.writeStringField("kind", "DedupConflict");
            g.writeStringField("key", c.key());
            g.writeStringField("task_id", c.taskId());
            g.writeStringField("existing_queue", c.existingQueue());
        } else if (e instanceof IdConflictException c) {
            g.writeStringField("kind", "IDConflict");
            g.writeStringField("task_id", c.taskId());
            g.writeStringField("existing_queue", c.existingQueue());
        } else if (e instanceof ControlConflictException c) {
            g.writeStringField("kind", "ControlConflict");
            g.writeStringField("queue", c.queue());
            g.writeStringField("key", c.key());
            if (c.found() == null) {
                g.writeNullField("found");
            } else {
                g.writeFieldName("found");
                control(g, c.found());
            }
        } else if (e instanceof NotConnectedException n) {
            g.writeStringField("kind", "NotConnected");
            g.writeBooleanField("closed", n.closed());
        } else if (e instanceof StorageUnavailableException) {
            g.writeStringField("kind", "StorageUnavailable");
            g.writeStringField("message", e.getMessage());
        } else if (e instanceof RdqException) {
            g.writeStringField("kind", "StorageError");
            g.writeStringField("message", e.getMessage());
        } else if (e instanceof UnsupportedOperationException) {
            g.writeStringField("kind", "NotImplemented");
            g.writeStringField("message", String.valueOf(e.getMessage()));
        } else {
            StringWriter trace = new StringWriter();
            e.printStackTrace(new PrintWriter(trace));
            g.writeStringField("kind", "JavaError");
            g.writeStringField("message", trace.toString());
        }
        g.writeEndObject();
    }
}
