"""rdq: a durable retry and dead-letter queue for Python services.

The application API lives here; plugin authors use :mod:`rdq.spi`; errors are in
:mod:`rdq.errors`.
"""

from rdq._plugins.manager import installed_backends, open_storage
from rdq.errors import (
    ConfigError,
    IDConflict,
    NotFound,
    RdqError,
    StaleClaim,
    StaleCursor,
    StorageError,
    StorageUnavailable,
    ValidationError,
)
from rdq.signals import Permanent, RetryAfter

__all__ = [
    "ConfigError",
    "IDConflict",
    "NotFound",
    "Permanent",
    "RdqError",
    "RetryAfter",
    "StaleClaim",
    "StaleCursor",
    "StorageError",
    "StorageUnavailable",
    "ValidationError",
    "installed_backends",
    "open_storage",
]
