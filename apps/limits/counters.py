"""Budget and rate-limit counters, checked and charged for a request in one step.

One interface, ``Counters``, and two implementations chosen once by ``counters()``
(``apps/core/backends.py``): callers never ask which one runs.

With Redis (every process and node shares them), ``admit`` is one Lua script, so a request costs
one round trip before its upstream call: it reads the API key's revocation marker and the
organization's configuration generation (what ``apps/keys/revocation.check`` reads for requests no
limit applies to), and, only when the key is not revoked and the caller's configuration is current,
checks every rate limit and budget that applies and, if all of them fit, charges them together.
Without Redis (the embedded default: one server process) ``LocalCounters`` does the same in memory,
reading the key's revocation mark and the generation this process holds (``apps/core``).

Rate limits are GCRA (a token bucket that holds the time at which it is next empty): exact, one
key per limit, and the burst is the whole minute's allowance. Budgets are a hash per scope and
window: ``spent`` and ``reserved`` nano-dollars, ``seeded`` once the window's spend so far has been
loaded from the audit log, and one flag per threshold already announced; beside it a sorted set of
the reservations in flight (``<request id>:<nano-dollars>``, scored by expiry), so the reservation
of a request whose process died is given back after ``GATEWAY_BUDGET_RESERVATION_SECONDS``.
"""

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Protocol

import redis

from apps.core.backends import backend
from apps.core.generations import generation_key, local_generation, new_seed
from apps.core.redis import RedisPaused, async_client, proxy_redis_pause, redis_key, sync_client
from apps.core.revocation_marks import local_marks, marker

from .windows import Window

MINUTE_MS = 60_000


class CountersUnavailable(Exception):
    """Redis could not be reached."""


@dataclass(frozen=True, slots=True)
class RateCharge:
    """One rate limit a request is counted against."""

    scope: str  # api_key, team
    scope_id: str
    kind: str  # requests, tokens
    limit: int  # per minute; 0 refuses everything
    cost: int  # 1 request, or the tokens estimated
    key: str = ""

    @staticmethod
    def of(organization_id: str, scope: str, scope_id: str, kind: str, limit: int, cost: int) -> "RateCharge":
        key = _rate_key(organization_id, scope, scope_id, kind)
        return RateCharge(scope, scope_id, kind, limit, cost, key)


@dataclass(frozen=True, slots=True)
class BudgetCharge:
    """One budget a request reserves its maximum cost in."""

    scope: str  # organization, team, api_key
    scope_id: str
    window: Window
    limit_nanos: int
    reserve_nanos: int
    thresholds: tuple[int, ...]
    key: str = ""

    @property
    def threshold_list(self) -> str:
        return ",".join(map(str, self.thresholds)) or "-"

    @staticmethod
    def of(
        organization_id: str,
        scope: str,
        scope_id: str,
        window: Window,
        limit_nanos: int,
        reserve_nanos: int,
        thresholds: Iterable[int],
    ) -> "BudgetCharge":
        key = budget_key(organization_id, scope, scope_id, window)
        return BudgetCharge(scope, scope_id, window, limit_nanos, reserve_nanos, tuple(thresholds), key)


# Keys are built for every request a limit applies to, from a few distinct parts: built once each.
@lru_cache(maxsize=4096)
def _rate_key(organization_id: str, scope: str, scope_id: str, kind: str) -> str:
    return redis_key("rate", organization_id, scope, scope_id, kind)


@lru_cache(maxsize=4096)
def _budget_key(organization_id: str, scope: str, scope_id: str, window_id: str) -> str:
    return redis_key("budget", organization_id, scope, scope_id, window_id)


def budget_key(organization_id: str, scope: str, scope_id: str, window: Window) -> str:
    return _budget_key(str(organization_id), scope, str(scope_id), window.id)


@dataclass(frozen=True, slots=True)
class RateState:
    charge: RateCharge
    remaining: int
    reset_ms: int  # until the bucket is full again
    retry_after_ms: int = 0  # refused: until the request would fit


@dataclass(slots=True)
class Admission:
    revoked: bool = False
    generation: int | None = None
    # The caller's configuration is older than the generation: nothing was checked or charged.
    stale: bool = False
    # Windows whose spend so far must be loaded (``seed``) before anything is charged to them.
    unseeded: list[BudgetCharge] = field(default_factory=list)
    refused_rate: RateState | None = None
    refused_budget: BudgetCharge | None = None
    # The budget refused for the first time in its window (budget.exceeded is announced once).
    first_refusal: bool = False
    rates: list[RateState] = field(default_factory=list)
    reserved: list[BudgetCharge] = field(default_factory=list)
    # The thresholds crossed by each settle that went in the same round trip (``settling``).
    settled: list[list["Crossing"]] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return not (self.revoked or self.stale or self.unseeded or self.refused_rate or self.refused_budget)


@dataclass(frozen=True, slots=True)
class Crossing:
    """A budget whose spend passed one of its thresholds for the first time in its window."""

    charge: BudgetCharge
    threshold: int
    spent_nanos: int


@dataclass(frozen=True, slots=True)
class SettleEntry:
    """One request's settlement: its budgets with the real cost, its token charges with the
    correction (real tokens minus those counted up front)."""

    request_id: str
    budgets: list[tuple["BudgetCharge", int]]
    tokens: list[tuple["RateCharge", int]]


@dataclass(frozen=True, slots=True)
class Usage:
    spent_nanos: int
    reserved_nanos: int


class Counters(Protocol):
    """What the proxy (async) and the management side (sync) ask of the counters. Every method may
    raise ``CountersUnavailable`` (Redis out of reach, or skipped after a failure:
    ``apps.core.redis.proxy_redis_pause`` on the proxy's path); the embedded one never does."""

    async def admit(
        self,
        *,
        key_id: str,
        organization_id: str,
        expected_generation: int,
        request_id: str,
        now: datetime,
        reservation_seconds: float,
        rates: list[RateCharge],
        budgets: list[BudgetCharge],
        settling: Sequence[SettleEntry] = (),
    ) -> Admission:
        """Refuses a revoked key and a stale configuration before anything else; else checks every
        rate limit and budget and, if all fit, charges them together. ``settling``: settles made
        first, in the same step (their crossings in ``Admission.settled``)."""
        ...

    async def settle(
        self,
        *,
        request_id: str,
        now: datetime,
        budgets: list[tuple[BudgetCharge, int]],
        tokens: list[tuple[RateCharge, int]],
    ) -> list[Crossing]: ...

    async def settle_many(self, *, now: datetime, entries: Sequence[SettleEntry]) -> list[list[Crossing]]: ...

    async def seed(self, *, now: datetime, spent: list[tuple[BudgetCharge, int]]) -> None:
        """Each window's spend so far, taken only by a window nobody has seeded yet."""
        ...

    def usage(self, key: str) -> Usage:
        """Synchronous, for the management API: the window's spend and what is reserved in it."""
        ...

    def set_spent(self, charge: BudgetCharge, nanos: int, now: datetime) -> int | None:
        """Synchronous, for reconcile: the window's spend becomes ``nanos`` and counts as loaded; its
        reservations and threshold flags stay. Returns the spend before, None if it was not loaded."""
        ...


# --- The scripts ------------------------------------------------------------------------------------

# KEYS: revocation marker, generation, then one key per rate charge, then per budget its hash and its
# reservation set. argv: expected generation, the generation's seed (used when it is missing), now
# (ms), request id, reservation expiry (ms), number of rate charges, then per charge limit and cost;
# number of budgets, then per budget limit, reservation and the reservation set's time to live (s).
# The hash's time to live is set once, when its window is seeded.
# Returns {0, generation, remaining1, reset1, ...} admitted; {1, generation} revoked; {2, generation}
# stale; {3, generation, i, retry_after_ms} rate charge i refused; {4, generation, j, first}
# budget j refused; {5, generation, j1, j2 ...} budgets to seed first.
# Amounts go to Redis as the strings they came as: Lua formats numbers with 14 digits.
# Every script takes its arguments as one string (RedisCounters._run) and starts by splitting it.
UNPACK = """
local argv = {}
for value in string.gmatch(ARGV[1], '[^ ]+') do argv[#argv + 1] = value end
"""
GIVE_BACK = """
local function give_back(hash, amount)
  if amount and amount ~= '0' then redis.call('HINCRBY', hash, 'reserved', '-' .. amount) end
end
-- A reservation is the member "<request id>:<nano-dollars>" of the window's set, scored by its expiry.
local function reserved_amount(hash, member)
  local amount = string.match(member, ':(%d+)$')
  if amount then return amount end
  -- Left by the earlier layout, which kept the amount in the hash (one field per request).
  amount = redis.call('HGET', hash, 'r:' .. member)
  redis.call('HDEL', hash, 'r:' .. member)
  return amount
end
"""

ADMIT_FUNCTION = """
local function admit_request(k, a)
  -- A missing generation (a Redis that restarted empty) starts from the caller's seed, never from 0
  -- (apps/core/generations.py): a copy of the configuration held from before is then stale.
  local stored = redis.call('GET', KEYS[k + 2])
  if not stored then
    stored = argv[a + 2]
    redis.call('SET', KEYS[k + 2], stored)
  end
  local generation = tonumber(stored)
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then return {1, generation} end
  if generation ~= tonumber(argv[a + 1]) then return {2, generation} end
  local now = tonumber(argv[a + 3])
  local request_id = argv[a + 4]
  local expires = tonumber(argv[a + 5])
  local rates = tonumber(argv[a + 6])
  local arg = 7
  local tats = {}
  local result = {0, generation}
  for i = 1, rates do
    local limit, cost = tonumber(argv[a + arg]), tonumber(argv[a + arg + 1])
    arg = arg + 2
    if limit == 0 then return {3, generation, i, 60000} end
    local interval = 60000 / limit
    local tat = tonumber(redis.call('GET', KEYS[k + 2 + i]) or '0')
    if tat < now then tat = now end
    local new_tat = tat + cost * interval
    if cost * interval > 60000 then return {3, generation, i, -1} end
    if new_tat - now > 60000 then return {3, generation, i, math.ceil(new_tat - now - 60000)} end
    tats[i] = new_tat
    result[#result + 1] = math.floor((now + 60000 - new_tat) / interval)
    result[#result + 1] = math.ceil(new_tat - now)
  end
  local budgets = tonumber(argv[a + arg])
  arg = arg + 1
  local first_budget = 2 + rates
  local unseeded = {}
  local states = {}
  for j = 1, budgets do
    local hash, reservations = KEYS[k + first_budget + 2 * j - 1], KEYS[k + first_budget + 2 * j]
    -- Reservations of requests that never settled (their process died), a few at a time.
    for _, expired in ipairs(redis.call('ZRANGEBYSCORE', reservations, '-inf', now, 'LIMIT', 0, 20)) do
      if redis.call('ZREM', reservations, expired) == 1 then
        give_back(hash, reserved_amount(hash, expired))
      end
    end
    states[j] = redis.call('HMGET', hash, 'seeded', 'spent', 'reserved')
    if not states[j][1] then unseeded[#unseeded + 1] = j end
  end
  if #unseeded > 0 then
    local answer = {5, generation}
    for _, j in ipairs(unseeded) do answer[#answer + 1] = j end
    return answer
  end
  for j = 1, budgets do
    local at = a + arg + 3 * (j - 1)
    local limit, reserve = tonumber(argv[at]), tonumber(argv[at + 1])
    local spent, reserved = tonumber(states[j][2] or '0'), tonumber(states[j][3] or '0')
    if spent >= limit or spent + reserved + reserve > limit then
      local hash = KEYS[k + first_budget + 2 * j - 1]
      return {4, generation, j, redis.call('HSETNX', hash, 'exceeded', '1')}
    end
  end
  for i = 1, rates do
    redis.call('SET', KEYS[k + 2 + i], tats[i], 'PX', 120000)
  end
  for j = 1, budgets do
    local hash, reservations = KEYS[k + first_budget + 2 * j - 1], KEYS[k + first_budget + 2 * j]
    local reserve, ttl = argv[a + arg + 3 * (j - 1) + 1], argv[a + arg + 3 * (j - 1) + 2]
    redis.call('HINCRBY', hash, 'reserved', reserve)
    redis.call('ZADD', reservations, expires, request_id .. ':' .. reserve)
    redis.call('EXPIRE', reservations, ttl)
  end
  return result
end
"""

# Many requests at once (settles are batched): argv: now (ms), number of requests, then per request
# its id, its number of budgets, per budget the actual cost, the limit, the amount reserved and the
# thresholds ("50,80,100"), its number of token rate charges, per charge the limit and the tokens to
# add (negative: to give back). KEYS, in the same order: per budget its hash and reservation set, per
# charge its key. Returns, per request and budget, the spend after, then the thresholds crossed:
# {spent, n, t..., spent, n, t...}.
SETTLE_FUNCTION = """
local function settle_requests(k, a)
  local now = tonumber(argv[a + 1])
  local requests = tonumber(argv[a + 2])
  local arg, key = 3, 1
  local result = {}
  for _ = 1, requests do
    local request_id = argv[a + arg]
    local budgets = tonumber(argv[a + arg + 1])
    arg = arg + 2
    for _ = 1, budgets do
      local hash, reservations = KEYS[k + key], KEYS[k + key + 1]
      key = key + 2
      local actual, limit = argv[a + arg], tonumber(argv[a + arg + 1])
      local reserved, thresholds = argv[a + arg + 2], argv[a + arg + 3]
      arg = arg + 4
      -- Given back once: a reservation already returned as expired is no longer in the set.
      if redis.call('ZREM', reservations, request_id .. ':' .. reserved) == 1 then
        give_back(hash, reserved)
      end
      local spent = redis.call('HINCRBY', hash, 'spent', actual)
      local crossed = {}
      for threshold in string.gmatch(thresholds, '%d+') do
        local reached = spent * 100 >= tonumber(threshold) * limit
        if reached and redis.call('HSETNX', hash, 't' .. threshold, '1') == 1 then
          crossed[#crossed + 1] = tonumber(threshold)
        end
      end
      result[#result + 1] = spent
      result[#result + 1] = #crossed
      for _, threshold in ipairs(crossed) do result[#result + 1] = threshold end
    end
    local rates = tonumber(argv[a + arg])
    arg = arg + 1
    for _ = 1, rates do
      local rate_key = KEYS[k + key]
      key = key + 1
      local limit, tokens = tonumber(argv[a + arg]), tonumber(argv[a + arg + 1])
      arg = arg + 2
      local tat = tonumber(redis.call('GET', rate_key) or '0')
      if tat > 0 and limit > 0 then
        tat = tat + tokens * 60000 / limit
        if tat > now then
          redis.call('SET', rate_key, tat, 'PX', 120000)
        else
          redis.call('DEL', rate_key)
        end
      end
    end
  end
  return result, k + key - 1, a + arg - 1
end
"""

ADMIT = UNPACK + GIVE_BACK + ADMIT_FUNCTION + "return admit_request(0, 0)\n"
SETTLE = UNPACK + GIVE_BACK + SETTLE_FUNCTION + "return (settle_requests(0, 0))\n"
# The settles a process has waiting, then one request's admission: the settle's KEYS and argv first,
# the admission's after them. Returns {admission's answer, settle's answer}.
ADMIT_AND_SETTLE = (
    UNPACK
    + GIVE_BACK
    + SETTLE_FUNCTION
    + ADMIT_FUNCTION
    + """
local settled, k, a = settle_requests(0, 0)
return {admit_request(k, a), settled}
"""
)

# KEYS: per budget its hash. argv: per budget the spend so far and the time to live. Only a window
# nobody has seeded yet takes the value.
SEED = (
    UNPACK
    + """
for j = 1, #KEYS do
  if redis.call('HSETNX', KEYS[j], 'seeded', '1') == 1 then
    redis.call('HINCRBY', KEYS[j], 'spent', argv[2 * j - 1])
    redis.call('EXPIRE', KEYS[j], argv[2 * j])
  end
end
return #KEYS
"""
)


def _ttl_seconds(window: Window, now: datetime) -> int:
    # Kept a day past the window so its usage can still be read.
    return max(60, int((window.end - now).total_seconds()) + 86_400)


def _reservations_key(hash_key: str) -> str:
    return hash_key + ":reservations"


class RedisCounters:
    """The counters in Redis, shared by every process and node."""

    def __init__(self) -> None:
        self._shas: dict[str, str] = {}

    async def _run(self, source: str, keys: list, args: list):
        """EVALSHA, loading the script when Redis does not know it (a restart, a flush); straight
        on the client, which costs less per call than redis-py's Script wrapper."""
        client = async_client()
        sha = self._shas.get(source)
        # The arguments go as one space-separated string (the scripts split it into ``argv``):
        # redis-py encodes each argument on its own, which costs more than the round trip's wait.
        packed = " ".join(map(str, args))
        try:
            proxy_redis_pause.check()
            answer = None
            if sha is not None:
                try:
                    answer = await client.evalsha(sha, len(keys), *keys, packed)
                except redis.exceptions.NoScriptError:
                    sha = None
            if sha is None:
                sha = self._shas[source] = await client.script_load(source)
                answer = await client.evalsha(sha, len(keys), *keys, packed)
        except (redis.RedisError, OSError) as error:
            if not isinstance(error, RedisPaused):
                proxy_redis_pause.failed()  # the next requests take their fail mode at once
            raise CountersUnavailable(str(error)) from error
        proxy_redis_pause.succeeded()
        return answer

    async def admit(
        self,
        *,
        key_id: str,
        organization_id: str,
        expected_generation: int,
        request_id: str,
        now: datetime,
        reservation_seconds: float,
        rates: list[RateCharge],
        budgets: list[BudgetCharge],
        settling: Sequence[SettleEntry] = (),
    ) -> Admission:
        """``settling``: settles this process has waiting, made in the same round trip before the
        admission (their crossings in ``Admission.settled``)."""
        now_ms = int(now.timestamp() * 1000)
        settle_keys, settle_args = _settle_arguments(now, settling) if settling else ([], [])
        keys = [
            *settle_keys,
            marker(key_id),
            generation_key(organization_id),
            *(charge.key for charge in rates),
        ]
        args: list = [
            *settle_args,
            expected_generation,
            new_seed(),
            now_ms,
            request_id,
            now_ms + int(reservation_seconds * 1000),
            len(rates),
        ]
        for charge in rates:
            args += [charge.limit, charge.cost]
        args.append(len(budgets))
        for charge in budgets:
            keys += [charge.key, _reservations_key(charge.key)]
            args += [charge.limit_nanos, charge.reserve_nanos, _ttl_seconds(charge.window, now)]
        if not settling:
            return _admission(await self._run(ADMIT, keys, args), rates, budgets)
        answer, settled = await self._run(ADMIT_AND_SETTLE, keys, args)
        admission = _admission(answer, rates, budgets)
        admission.settled = _all_crossings(settled, settling)
        return admission

    async def settle(
        self,
        *,
        request_id: str,
        now: datetime,
        budgets: list[tuple[BudgetCharge, int]],
        tokens: list[tuple[RateCharge, int]],
    ) -> list[Crossing]:
        return (await self.settle_many(now=now, entries=[SettleEntry(request_id, budgets, tokens)]))[0]

    async def settle_many(self, *, now: datetime, entries: Sequence[SettleEntry]) -> list[list[Crossing]]:
        """Settles several requests in one round trip; the thresholds each one crossed."""
        keys, args = _settle_arguments(now, entries)
        return _all_crossings(await self._run(SETTLE, keys, args), entries)

    async def seed(self, *, now: datetime, spent: list[tuple[BudgetCharge, int]]) -> None:
        keys, args = [], []
        for charge, nanos in spent:
            keys.append(charge.key)
            args += [nanos, _ttl_seconds(charge.window, now)]
        await self._run(SEED, keys, args)

    def usage(self, key: str) -> Usage:
        try:
            spent, reserved = sync_client().hmget(key, "spent", "reserved")
        except (redis.RedisError, OSError) as error:
            raise CountersUnavailable(str(error)) from error
        return Usage(int(spent or 0), max(0, int(reserved or 0)))

    def set_spent(self, charge: BudgetCharge, nanos: int, now: datetime) -> int | None:
        """A rare call: the script is sent whole (EVAL), not kept registered."""
        script = """
            local before = redis.call('HGET', KEYS[1], 'spent') or '0'
            local seeded = redis.call('HEXISTS', KEYS[1], 'seeded')
            redis.call('HSET', KEYS[1], 'spent', ARGV[1], 'seeded', '1')
            redis.call('EXPIRE', KEYS[1], ARGV[2])
            return {before, seeded}
        """
        try:
            before, seeded = sync_client().eval(
                script, 1, charge.key, nanos, _ttl_seconds(charge.window, now)
            )
        except (redis.RedisError, OSError) as error:
            raise CountersUnavailable(str(error)) from error
        return int(before or 0) if int(seeded) else None


def _admission(answer: list, rates: list[RateCharge], budgets: list[BudgetCharge]) -> Admission:
    status, generation = int(answer[0]), int(answer[1])
    admission = Admission(generation=generation)
    if status == 1:
        admission.revoked = True
    elif status == 2:
        admission.stale = True
    elif status == 3:
        charge = rates[int(answer[2]) - 1]
        admission.refused_rate = RateState(
            charge, remaining=0, reset_ms=MINUTE_MS, retry_after_ms=int(answer[3])
        )
    elif status == 4:
        admission.refused_budget = budgets[int(answer[2]) - 1]
        admission.first_refusal = int(answer[3]) == 1
    elif status == 5:
        admission.unseeded = [budgets[int(j) - 1] for j in answer[2:]]
    else:
        values = [int(value) for value in answer[2:]]
        admission.rates = [
            RateState(charge, remaining=values[2 * i], reset_ms=values[2 * i + 1])
            for i, charge in enumerate(rates)
        ]
        admission.reserved = list(budgets)
    return admission


def _settle_arguments(now: datetime, entries: list[SettleEntry]) -> tuple[list, list]:
    keys, args = [], [int(now.timestamp() * 1000), len(entries)]
    for entry in entries:
        args += [entry.request_id, len(entry.budgets)]
        for charge, actual in entry.budgets:
            keys += [charge.key, _reservations_key(charge.key)]
            args += [actual, charge.limit_nanos, charge.reserve_nanos, charge.threshold_list]
        args.append(len(entry.tokens))
        for charge, delta in entry.tokens:
            keys.append(charge.key)
            args += [charge.limit, delta]
    return keys, args


def _all_crossings(answer: list, entries: list[SettleEntry]) -> list[list[Crossing]]:
    crossings, position = [], 0
    for entry in entries:
        found, position = _crossings(answer, position, [charge for charge, _ in entry.budgets])
        crossings.append(found)
    return crossings


def _crossings(answer: list, position: int, budgets: list[BudgetCharge]) -> tuple[list[Crossing], int]:
    crossings = []
    for charge in budgets:
        spent, count = int(answer[position]), int(answer[position + 1])
        crossings += [Crossing(charge, int(t), spent) for t in answer[position + 2 : position + 2 + count]]
        position += 2 + count
    return crossings, position


# --- In process ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Budget:
    spent: int = 0
    reserved: int = 0
    seeded: bool = False
    # request id -> (nanos, expiry in ms)
    reservations: dict[str, tuple[int, int]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    expires_at: float = 0.0


class LocalCounters:
    """The same counters in this process's memory: the embedded default, where one server process
    serves every request. Every method runs without an await, so on the event loop each is atomic."""

    def __init__(self) -> None:
        self._tats: dict[str, tuple[float, float]] = {}  # key -> (tat ms, forget after, monotonic)
        self._budgets: dict[str, _Budget] = {}

    def _budget(self, charge: BudgetCharge, now: datetime) -> _Budget:
        budget = self._budgets.get(charge.key)
        if budget is None:
            self._forget_old()
            budget = self._budgets[charge.key] = _Budget()
        budget.expires_at = time.monotonic() + _ttl_seconds(charge.window, now)
        return budget

    def _forget_old(self) -> None:
        moment = time.monotonic()
        for key in [key for key, budget in self._budgets.items() if budget.expires_at < moment]:
            del self._budgets[key]
        for key in [key for key, (_, forget) in self._tats.items() if forget < moment]:
            del self._tats[key]

    async def admit(
        self,
        *,
        key_id: str,
        organization_id: str,
        expected_generation: int,
        request_id: str,
        now: datetime,
        reservation_seconds: float,
        rates: list[RateCharge],
        budgets: list[BudgetCharge],
        settling: Sequence[SettleEntry] = (),
    ) -> Admission:
        settled = [self._settle(entry, now) for entry in settling]
        generation = local_generation(organization_id)
        if key_id in local_marks:
            admission = Admission(revoked=True)
        elif generation != expected_generation:
            admission = Admission(stale=True)
        else:
            admission = self._admit(request_id, now, reservation_seconds, rates, budgets)
        admission.generation, admission.settled = generation, settled
        return admission

    def _admit(self, request_id, now, reservation_seconds, rates, budgets) -> Admission:
        now_ms = now.timestamp() * 1000
        admission = Admission()
        new_tats, states = [], []
        for charge in rates:
            if charge.limit == 0:
                admission.refused_rate = RateState(charge, 0, MINUTE_MS, retry_after_ms=MINUTE_MS)
                return admission
            interval = MINUTE_MS / charge.limit
            tat = max(self._tats.get(charge.key, (0.0, 0.0))[0], now_ms)
            new_tat = tat + charge.cost * interval
            if charge.cost * interval > MINUTE_MS:
                admission.refused_rate = RateState(charge, 0, MINUTE_MS, retry_after_ms=-1)
                return admission
            if new_tat - now_ms > MINUTE_MS:
                retry = int(-(-(new_tat - now_ms - MINUTE_MS) // 1))
                admission.refused_rate = RateState(charge, 0, MINUTE_MS, retry_after_ms=retry)
                return admission
            new_tats.append(new_tat)
            states.append(
                RateState(
                    charge, int((now_ms + MINUTE_MS - new_tat) // interval), int(-(-(new_tat - now_ms) // 1))
                )
            )
        counters = [self._budget(charge, now) for charge in budgets]
        for budget in counters:
            for rid, (nanos, expiry) in list(budget.reservations.items()):
                if expiry <= now_ms:
                    budget.reserved -= nanos
                    del budget.reservations[rid]
        admission.unseeded = [
            charge for charge, budget in zip(budgets, counters, strict=True) if not budget.seeded
        ]
        if admission.unseeded:
            return admission
        for charge, budget in zip(budgets, counters, strict=True):
            if (
                budget.spent >= charge.limit_nanos
                or budget.spent + budget.reserved + charge.reserve_nanos > charge.limit_nanos
            ):
                admission.refused_budget = charge
                admission.first_refusal = "exceeded" not in budget.flags
                budget.flags.add("exceeded")
                return admission
        forget = time.monotonic() + 120
        for charge, new_tat in zip(rates, new_tats, strict=True):
            self._tats[charge.key] = (new_tat, forget)
        expiry = int(now_ms + reservation_seconds * 1000)
        for charge, budget in zip(budgets, counters, strict=True):
            budget.reserved += charge.reserve_nanos
            budget.reservations[request_id] = (charge.reserve_nanos, expiry)
        admission.rates, admission.reserved = states, list(budgets)
        return admission

    async def settle(
        self,
        *,
        request_id: str,
        now: datetime,
        budgets: list[tuple[BudgetCharge, int]],
        tokens: list[tuple[RateCharge, int]],
    ) -> list[Crossing]:
        return self._settle(SettleEntry(request_id, budgets, tokens), now)

    def _settle(self, entry: SettleEntry, now: datetime) -> list[Crossing]:
        request_id, budgets, tokens = entry.request_id, entry.budgets, entry.tokens
        crossings = []
        for charge, actual in budgets:
            budget = self._budget(charge, now)
            reservation = budget.reservations.pop(request_id, None)
            if reservation is not None:
                budget.reserved -= reservation[0]
            budget.spent += actual
            for threshold in charge.thresholds:
                flag = f"t{threshold}"
                if budget.spent * 100 >= threshold * charge.limit_nanos and flag not in budget.flags:
                    budget.flags.add(flag)
                    crossings.append(Crossing(charge, threshold, budget.spent))
        now_ms = now.timestamp() * 1000
        for charge, delta in tokens:
            held = self._tats.get(charge.key)
            if held is not None and charge.limit > 0:
                tat = held[0] + delta * MINUTE_MS / charge.limit
                if tat > now_ms:
                    self._tats[charge.key] = (tat, held[1])
                else:
                    del self._tats[charge.key]
        return crossings

    async def settle_many(self, *, now: datetime, entries: Sequence[SettleEntry]) -> list[list[Crossing]]:
        return [self._settle(entry, now) for entry in entries]

    async def seed(self, *, now: datetime, spent: list[tuple[BudgetCharge, int]]) -> None:
        for charge, nanos in spent:
            budget = self._budget(charge, now)
            if not budget.seeded:
                budget.seeded = True
                budget.spent += nanos

    def usage(self, key: str) -> Usage:
        budget = self._budgets.get(key)
        if budget is None:
            return Usage(0, 0)
        return Usage(budget.spent, max(0, budget.reserved))

    def clear(self) -> None:
        self._tats.clear()
        self._budgets.clear()

    def set_spent(self, charge: BudgetCharge, nanos: int, now: datetime) -> int | None:
        """Called from a management thread beside the proxy's
        event loop, so it only assigns (no sweep of old windows, no read-modify-write)."""
        budget = self._budgets.setdefault(charge.key, _Budget())
        before = budget.spent if budget.seeded else None
        budget.spent, budget.seeded = nanos, True
        budget.expires_at = max(budget.expires_at, time.monotonic() + _ttl_seconds(charge.window, now))
        return before


local_counters = LocalCounters()
redis_counters = RedisCounters()
# This deployment's counters: the one function that chooses.
counters: Callable[[], Counters] = backend(lambda: local_counters, lambda: redis_counters)
