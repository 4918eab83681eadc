"""What every package's tests share, wherever pytest starts from in this repository.

Hypothesis checks no timing here: the tests run on shared machines (two processes per suite on
two cores, beside the servers they start), where how fast an example is drawn or run says
nothing about the code. Speed is measured in benchmarks, never asserted in tests."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "rdq", suppress_health_check=[HealthCheck.too_slow], deadline=None, print_blob=True
)
settings.load_profile("rdq")
