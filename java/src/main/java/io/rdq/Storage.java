package io.rdq;

import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Set;

/**
 * The storage contract of rdq: the same operations, promises and errors as the Python
 * {@code rdq.spi.Storage} protocol (its docstrings are the contract; this interface names them
 * the Java way). Every operation validates its input first and throws
 * {@link ValidationException} naming the field before touching stored state; an unreachable or
 * unresponsive backend throws {@link StorageUnavailableException}; other failures a
 * {@link StorageException}. Operations before {@link #connect()} or after {@link #close()}
 * throw {@link NotConnectedException}. Implementations are safe for use by many threads.
 */
public interface Storage extends AutoCloseable {

    /** Open connections (idempotent). Throws {@link StorageUnavailableException} naming the
     * endpoint when the backend cannot be reached. */
    void connect();

    /** Release every connection (idempotent); {@link #connect()} opens the store again. */
    @Override
    void close();

    /** Create or upgrade the schema; idempotent and safe when several processes run it.
     * Returns the names of the steps this call applied, in order (empty when the schema was
     * already up to date). */
    List<String> migrate();

    /** Admit {@code task} due at its {@code nextAttemptAt}, else now + {@code delay} (null: now).
     * Returns false if the id already exists in the same queue; throws
     * {@link IdConflictException} if it exists in another. */
    boolean enqueue(Envelope task, Duration delay);

    default boolean enqueue(Envelope task) {
        return enqueue(task, null);
    }

    /** {@link #enqueue} for many tasks at once: all valid tasks or none are admitted. */
    List<Boolean> enqueueBatch(List<Envelope> tasks, Duration delay);

    /** Claim up to {@code limit} due tasks of {@code queue}, highest priority first, oldest due
     * first within a priority, leased for {@code lease} by the storage clock. */
    List<Claimed> claimDue(String queue, int limit, Duration lease, String workerId);

    default List<Claimed> claimDue(String queue, int limit, Duration lease) {
        return claimDue(queue, limit, lease, null);
    }

    /** Set the lease to storage now + {@code lease}; returns the new expiry. */
    Instant extendLease(String taskId, String token, Duration lease);

    /** Failure path: append {@code attempt}, PENDING again at {@code nextAt}. Fenced on
     * {@code token}: {@link StaleClaimException} (nothing changed) or {@link NotFoundException}. */
    void reschedule(String taskId, String token, Attempt attempt, Instant nextAt);

    /** Success path: append {@code attempt}, SUCCEEDED. Fenced like {@link #reschedule}. */
    void complete(String taskId, String token, Attempt attempt);

    /** {@link #complete}, or with {@code discard} the task deleted instead of kept SUCCEEDED
     * (with its dedup key), fenced the same way: {@link StaleClaimException} deletes nothing,
     * and a task already deleted is {@link NotFoundException} (capability
     * {@code discardSucceeded}; rdq's {@code complete(..., discard=True)}). */
    void complete(String taskId, String token, Attempt attempt, boolean discard);

    /** Give up: append {@code attempt}, DEAD. Fenced like {@link #reschedule}. */
    void deadLetter(String taskId, String token, Attempt attempt);

    /** {@link #complete} for many claims; per item null (applied) or the
     * {@link StaleClaimException} / {@link NotFoundException} {@code complete} would throw. */
    List<StorageException> completeMany(List<Completion> completions);

    /** One page of the DLQ of {@code queue} by (dead-lettering time, id). */
    Page<Envelope> dlqList(String queue, DlqFilter filter, PageRequest page);

    /** The task in any status with its full history; {@link NotFoundException} if absent. */
    Envelope get(String taskId);

    /** Return the selected DEAD tasks to PENDING, due now, attempt count reset. */
    int redrive(String queue, Selector selector);

    /** Delete the selected tasks (by ids: DEAD and CANCELLED; by filter: DEAD). */
    int purge(String queue, Selector selector);

    /** The DLQ grouped by (handler, last error type), largest group first. */
    List<DlqGroup> dlqGroups(String queue);

    /** One page of the tasks of {@code queue} in one status, by status time then id. */
    Page<Envelope> listTasks(String queue, TaskFilter filter, PageRequest page);

    /** Cancel the listed PENDING or IN_FLIGHT tasks of {@code queue}; returns how many. */
    int cancel(String queue, List<String> taskIds);

    /** The stats of every queue that holds a task, by queue name. */
    List<Stats> listQueues();

    /** Store tasks exactly as given (moving tasks between stores); one flag per task. */
    List<Boolean> importTasks(List<Envelope> tasks);

    /** Store an audit entry; returns it with its id and time (storage clock) set. */
    AuditEntry appendAudit(AuditEntry entry);

    /** One page of audit entries, newest first. */
    Page<AuditEntry> listAudit(AuditFilter filter, PageRequest page);

    /** The storage clock. */
    Instant now();

    /** A snapshot of the queue's counts by the storage clock. */
    Stats stats(String queue);

    /** Delete SUCCEEDED tasks completed, and CANCELLED ones cancelled, before {@code olderThan}. */
    int purgeSucceeded(String queue, Instant olderThan);

    Capabilities capabilities();

    // --- retention (contract version 5, capability retention) --------------------------------

    /** Delete the listed tasks of {@code queue} that are finished (DEAD, SUCCEEDED, CANCELLED)
     * with their status time before {@code before}, each atomically; every other id is left
     * alone (a task redriven and dead-lettered again since it was read is later, and stays).
     * Returns how many were deleted. */
    int expireTasks(String queue, List<String> taskIds, Instant before);

    // --- payload references (contract version 5, capability payloadRefs) ----------------------

    /** Which of {@code refs} some stored task carries in its {@code rdq-payload-ref} header, in
     * any status and any queue (admitted, imported or written by a dedup replacement); a
     * reference no stored task carries is not in the answer. rdq deletes a payload's blob only
     * when no task holds its reference. At most {@link Limits#MAX_LIMIT} references. */
    Set<String> heldPayloadRefs(List<String> refs);

    // --- dedup keys (contract version 5, capability dedup) ------------------------------------

    /** {@link #enqueue} under a dedup key, atomically: the task is added and takes the key when
     * no live task holds it; otherwise the holder is left (skipped), its window started again
     * (extended) or, when still PENDING, given the task's payload and headers (replaced; with
     * debounce also its due time, capped at the holder's created_at + maxAge). Of concurrent
     * admissions of one key exactly one adds a task. {@link IdConflictException} for an id of
     * another queue, {@link DedupConflictException} for a key held in another queue. */
    Admitted admit(Envelope task, Dedup dedup, Duration delay);

    // --- flow control (contract version 3, capability control) ------------------------------

    /** The control records of {@code queue} (every queue when null), by queue then key, each
     * with {@code inUse}: the tasks with its key that hold a live lease now. */
    List<Control> listControls(String queue);

    /** Write {@code control} if the stored one of its (queue, key) has version
     * {@code expectedVersion} (0: none yet); returns it as stored (version one more,
     * {@code updatedAt} the store's now). A change of rate, per or burst refills the bucket.
     * Throws {@link ControlConflictException} (nothing changed) when the version differs: of
     * racing writers of one version exactly one succeeds. */
    Control putControl(Control control, long expectedVersion);

    /** Delete the control of (queue, key) if its version is {@code expectedVersion}; true if
     * one was deleted, false if there was none; {@link ControlConflictException} otherwise. */
    boolean deleteControl(String queue, String key, long expectedVersion);

    /** Make the listed PENDING tasks of {@code queue} that are not yet due due now; returns how
     * many were moved (an id given twice counts once). */
    int retryNow(String queue, List<String> taskIds);

    // --- the fleet and counts (contract version 3) ------------------------------------------

    /** Store {@code info} under its id with {@code seenAt} the store's now, and
     * {@code startedAt} the store's now at the first heartbeat of the id; returns it as stored. */
    WorkerInfo heartbeatWorker(WorkerInfo info);

    /** Every registered worker, by id. */
    List<WorkerInfo> listWorkers();

    /** Forget a worker; true if it was registered. */
    boolean removeWorker(String workerId);

    /** Forget the workers last seen before {@code seenBefore}; returns how many. */
    int purgeWorkers(Instant seenBefore);

    /** Add each entry to the counts of its (queue, minute), atomically. */
    void addCounts(List<Counts> counts);

    /** The counts of {@code queue} (every queue when null) of the minutes from {@code since}
     * on, by queue then minute. */
    List<Counts> readCounts(String queue, Instant since);

    /** Delete the counts of the minutes before {@code before}; returns how many entries. */
    int purgeCounts(Instant before);

    /** Block until a task of {@code queue} may be due or {@code timeout} passes; true when woken. */
    boolean waitDue(String queue, Duration timeout);
}
