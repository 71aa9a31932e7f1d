"""One retry policy for every call podctl makes to Google (Cloud TPU, GCS): capped
exponential backoff with jitter, a bounded number of attempts and an overall deadline,
and only for the errors that can pass (each layer names its own transient error)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)


@dataclass(frozen=True)
class RetryPolicy:
    """For one call: how often and how long to retry errors that pass."""

    attempts: int = 6
    initial: float = 0.5
    maximum: float = 10.0
    deadline: float = 120.0
    jitter: float = 1.0  # up to this many seconds added to each wait

    def retrying(self, transient: type[BaseException] | Callable[[BaseException], bool],
                 sleep: Callable[[float], Any] = asyncio.sleep) -> AsyncRetrying:
        """TRANSIENT: the error type that can pass, or a predicate saying which errors can."""
        retry = (retry_if_exception_type(transient) if isinstance(transient, type)
                 else retry_if_exception(transient))
        return AsyncRetrying(
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.deadline),
            wait=wait_exponential_jitter(multiplier=self.initial, max=self.maximum, jitter=self.jitter),
            retry=retry,
            sleep=sleep,
            reraise=True,
        )
