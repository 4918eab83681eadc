"""What every package's tests share, wherever pytest starts from in this repository.

Hypothesis checks no timing here: the tests run on shared machines (two processes per suite on
two cores, beside the servers they start), where how fast an example is drawn or run says
nothing about the code. Speed is measured in benchmarks, never asserted in tests."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "rdq", suppress_health_check=[HealthCheck.too_slow], deadline=None, print_blob=True
)
settings.load_profile("rdq")

# Purges and retention write the tasks they delete to an archive (rdq.retention): in tests, a
# directory of the run's own, never the working directory (a test names its own when it reads
# one back).
import os  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("RDQ_ARCHIVE", tempfile.mkdtemp(prefix="rdq-test-archive-"))
