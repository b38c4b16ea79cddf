"""What the proxy holds in a process between requests, in one object built at start-up.

Every piece of the proxy's process state lives here and is reached one way, ``runtime.<piece>``:
the API keys held (auth.py), the organizations' configurations (config.py), the weighted rotation
and the circuit breaker (routing.py), the keys' last uses to write (key_usage.py), the budgets and token
limits to settle (settling.py), the registered
stages (pipeline.py), the cache's writes under way (caching.py), the upstream client sessions
(upstream.py) and the threads that compile policies.

``ProxyConfig.ready`` calls ``start`` once Django is set up; a test, or a second process layout
that wants the proxy's state afresh, calls ``reset`` (the caches and the breaker emptied, the
registered stages kept). Nothing is imported from the rest of the proxy when this module loads,
so every module of the proxy can import ``runtime`` without a cycle.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

    from .auth import ApiKeyCache
    from .config import ConfigStore
    from .key_usage import KeyUsageRecorder
    from .pipeline import StageRegistry
    from .routing import CircuitBreaker, SmoothWeightedRoundRobin
    from .settling import SettleQueue


class ProxyRuntime:
    __slots__ = (
        "background",
        "breaker",
        "configs",
        "key_usage",
        "keys",
        "policy_builds",
        "rotation",
        "sessions",
        "settles",
        "stages",
    )

    keys: "ApiKeyCache"
    configs: "ConfigStore"
    rotation: "SmoothWeightedRoundRobin"
    breaker: "CircuitBreaker"
    key_usage: "KeyUsageRecorder"
    settles: "SettleQueue"
    stages: "StageRegistry"
    # The response cache's L2 and L3 writes under way (off the request; kept so they are not collected).
    background: set[asyncio.Task[None]]
    # The upstream client session of each event loop (Daphne runs one; each test has its own).
    sessions: "dict[asyncio.AbstractEventLoop, aiohttp.ClientSession]"
    # Two threads: one organization's policy build does not queue another's behind it for long,
    # and the GIL makes more of them no faster.
    policy_builds: ThreadPoolExecutor

    def start(self) -> None:
        """Builds every piece, once per process: ``ProxyConfig.ready`` may run again (a test that
        changes INSTALLED_APPS), and building again would drop the registered stages (their module
        is imported once) and leak the policy-build threads."""
        if self.started:
            return
        from .auth import ApiKeyCache
        from .config import ConfigStore
        from .key_usage import KeyUsageRecorder
        from .pipeline import StageRegistry
        from .routing import CircuitBreaker, SmoothWeightedRoundRobin
        from .settling import SettleQueue

        self.keys = ApiKeyCache()
        self.configs = ConfigStore()
        self.rotation = SmoothWeightedRoundRobin()
        self.breaker = CircuitBreaker()
        self.key_usage = KeyUsageRecorder()
        self.settles = SettleQueue()
        self.stages = StageRegistry()
        self.background = set()
        self.sessions = {}
        self.policy_builds = ThreadPoolExecutor(max_workers=2, thread_name_prefix="policy-build")

    @property
    def started(self) -> bool:
        return hasattr(self, "keys")

    def reset(self) -> None:
        """Forgets what one test (or one process layout) left: keys, configurations, the rotation and
        the breaker. The stages stay registered; sessions and tasks belong to their event loops."""
        self.keys.clear()
        self.configs.clear()
        self.rotation.clear()
        self.breaker.clear()


runtime = ProxyRuntime()
