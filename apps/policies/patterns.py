"""An organization's own patterns and terms are compiled and test-run when they are saved, in a child
process that is killed if it takes too long, so that no policy can freeze a server, and what all of
an organization's active policies cost to compile is bounded (docs/policies.md, "Limits of patterns
and terms").

A pattern such as ``(?:a{1000}){3000}`` takes the ``regex`` package over 2 s of CPU and 750 MB to
compile (this machine, 2026-11-26); the proxy compiles an organization's patterns when its
configuration loads, in the thread every database call of the server shares, so such a pattern
would stall every organization. What is accepted here stays well inside what that load can afford:

- compiling takes at most ``COMPILE_SECONDS`` of CPU, and the compiled program (the memory every
  proxy worker keeps) is at most ``PROGRAM_BYTES``;
- searching ``pattern_child.samples`` (runs of the pattern's own characters ended by one it does not
  expect, and prose with numbers and addresses, 4,096 characters each) takes at most
  ``SEARCH_SECONDS``: the usual shapes of catastrophic backtracking (``(a+)+$``, ``(x+x+)+y``) show
  here rather than on a request (where the scan's deadline still blocks what slips through);
- a policy's terms become one alternation (``term_source``), checked as one more pattern within the
  same limits: 200 phrases of two words compile in 14 ms into 227 KB; the outside check's 200 random
  terms of 200 letters took 160-300 ms into 595 KB, and forty such policies froze every
  organization's database calls for 16 s: refused now;
- the whole policy at most ``POLICY_COMPILE_SECONDS``, ``POLICY_SEARCH_SECONDS`` and
  ``POLICY_PROGRAM_BYTES``;
- the organization at most ``ACTIVE_POLICIES_LIMIT`` active policies, which together compile in at
  most ``ORGANIZATION_COMPILE_SECONDS`` into at most ``ORGANIZATION_PROGRAM_BYTES`` (each policy's
  measures are kept on it: ``compile_micros``, ``program_bytes``). A configuration load builds the
  engine in a thread of its own (``apps/proxy/config.py``), but compiling holds the GIL in turns
  with every other thread of the worker: this bound is what keeps one organization's build short.

Measured for the limits (2026-11-26, this machine): realistic patterns (a 997-character alternation of
90 words, e-mail and SSN shapes, a base64 run, ``.{0,1000}secret``) compile in 0.05-2.5 ms into
1-35 KB and search the samples in under 1 ms; ``(?:a{1000}){30}`` compiles in 11 ms into 3.3 MB,
``x{100000}`` in 18 ms into 10.8 MB.

Times are the child's CPU time, so a busy machine does not refuse what a quiet one accepts. The
child is started with ``python -I`` on ``pattern_child.py`` (about 30 ms), capped at ``MEMORY_BYTES``
of address space, and killed once ``WALL_SECONDS`` have passed whatever it is doing: a save never
waits longer than that for the check, however slow the machine.

What passed is remembered as a digest of the patterns, the terms and their measures
(``rules_digest``) on the policy: the proxy compiles only patterns and terms whose digest matches
(``selectors.snapshot``), and only as far as the organization's bound allows (``engine.py``); lists
written around the services, or stored before this check existed and not passed by the migration
that checked them, block the requests their policy applies to instead of being compiled.
"""

import hashlib
import json
import logging
import math
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import regex

logger = logging.getLogger(__name__)

COMPILE_SECONDS = 0.05
SEARCH_SECONDS = 0.025
PROGRAM_BYTES = 512 * 1024
POLICY_COMPILE_SECONDS = 0.25
POLICY_SEARCH_SECONDS = 0.25
POLICY_PROGRAM_BYTES = 2 * 1024 * 1024
ACTIVE_POLICIES_LIMIT = 50
ORGANIZATION_COMPILE_SECONDS = 0.25
ORGANIZATION_PROGRAM_BYTES = 8 * 1024 * 1024
SAMPLE_CHARS = 4096
MEMORY_BYTES = 256 * 1024 * 1024
WALL_SECONDS = 2.0

_CHILD = Path(__file__).with_name("pattern_child.py")
_LIMITS = {
    "compile_seconds": COMPILE_SECONDS,
    "search_seconds": SEARCH_SECONDS,
    "size_bytes": PROGRAM_BYTES,
    "sample_chars": SAMPLE_CHARS,
    "memory_bytes": MEMORY_BYTES,
}


class PatternRefused(ValueError):
    """``position`` is the index of the refused pattern in the list (the terms come after the
    patterns, as one); ``field`` is the policy's field to name: ``patterns`` or ``terms``."""

    def __init__(self, message: str, *, position: int, field: str = "patterns") -> None:
        super().__init__(message)
        self.position = position
        self.field = field


@dataclass(frozen=True, slots=True)
class RulesCost:
    """What a policy's patterns and terms took to compile in the check: CPU time, program size."""

    compile_micros: int = 0
    program_bytes: int = 0


def term_source(terms: Iterable[str]) -> str:
    """Denied terms: case-insensitive, whole words; the longest first. Each term's left boundary is
    checked after its first characters (a lookbehind first would be tried at every position)."""
    alternatives = []
    for term in sorted(set(terms), key=lambda t: (-len(t), t)):
        escaped = regex.escape(term)
        alternatives.append(
            f"{escaped}(?<!\\w{escaped})(?!\\w)" if term[:1].isalnum() or term[:1] == "_" else escaped
        )
    return "(?i:" + "|".join(alternatives) + ")"


def rules_digest(patterns, terms, cost: RulesCost) -> str:
    """What a policy stores of the patterns, terms and measures that passed the check ("" for a
    policy with neither patterns nor terms)."""
    if not patterns and not terms:
        return ""
    checked = {
        "v": 2,
        "patterns": list(patterns),
        "terms": list(terms),
        "compile_micros": cost.compile_micros,
        "program_bytes": cost.program_bytes,
    }
    return hashlib.sha256(json.dumps(checked, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def organization_refusal(*, active: int, cost: RulesCost) -> str | None:
    """Why an organization's active policies, ``active`` of them costing ``cost`` together, exceed
    its bound (None: they do not)."""
    if active > ACTIVE_POLICIES_LIMIT:
        return f"An organization has at most {ACTIVE_POLICIES_LIMIT} active policies."
    if (
        cost.compile_micros > ORGANIZATION_COMPILE_SECONDS * 1_000_000
        or cost.program_bytes > ORGANIZATION_PROGRAM_BYTES
    ):
        return (
            "Together the organization's active policies' patterns and terms would take more than "
            f"{ORGANIZATION_COMPILE_SECONDS * 1000:.0f} ms or "
            f"{ORGANIZATION_PROGRAM_BYTES // (1024 * 1024)} MiB to compile."
        )
    return None


def check_rules(patterns: list[str], terms: list[str], *, wall_seconds: float = WALL_SECONDS) -> RulesCost:
    """Compiles and test-runs ``patterns`` and the alternation of ``terms`` (what the proxy compiles)
    in a child process: their measures, or ``PatternRefused`` naming the first that is invalid or
    exceeds a limit (or that the check could not finish within ``wall_seconds``)."""
    sources = [*patterns, term_source(terms)] if terms else list(patterns)
    if not sources:
        return RulesCost()
    # The terms are escaped words: their search cannot backtrack, it only grows with their number
    # (200 phrases take about 4 ms on 4,096 characters, bounded on a request by the scan's deadline);
    # what they cost to compile is what is checked.
    searched = [True] * len(patterns) + [False] * (len(sources) - len(patterns))
    try:
        return _check(sources, wall_seconds, searched=searched)
    except PatternRefused as refused:
        if refused.position < len(patterns):
            raise
        raise PatternRefused(_terms_refusal(str(refused)), position=0, field="terms") from None


def _check(patterns: list[str], wall_seconds: float, *, searched: list[bool]) -> RulesCost:
    request = json.dumps({"patterns": patterns, "limits": _LIMITS, "search": searched})
    try:
        # The command is fixed (this interpreter, our own script); the patterns travel on stdin.
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-I", str(_CHILD)],
            input=request.encode(),
            capture_output=True,
            timeout=wall_seconds,
            check=False,
        )
        output, killed = done.stdout, False
    except subprocess.TimeoutExpired as expired:  # run() has killed the child
        output, killed = expired.stdout or b"", True
    results = [json.loads(line) for line in output.decode().splitlines() if line.startswith("{")]
    compile_total = search_total = size_total = 0.0
    for result in results:
        position = result["index"]
        refused = result.get("refused")
        if refused is not None:
            raise PatternRefused(_refusal(position, refused, result), position=position)
        compile_total += result["compile"]
        search_total += result["search"]
        size_total += result["size"]
        if compile_total > POLICY_COMPILE_SECONDS or size_total > POLICY_PROGRAM_BYTES:
            raise PatternRefused(
                f"Pattern {position}: together the patterns are too large to compile within the "
                f"limits ({POLICY_COMPILE_SECONDS * 1000:.0f} ms, {POLICY_PROGRAM_BYTES // 1024} KiB).",
                position=position,
            )
        if search_total > POLICY_SEARCH_SECONDS:
            raise PatternRefused(
                f"Pattern {position}: together the patterns search too slowly "
                f"(more than {POLICY_SEARCH_SECONDS * 1000:.0f} ms on the test texts).",
                position=position,
            )
    if len(results) == len(patterns):
        return RulesCost(math.ceil(compile_total * 1_000_000), int(size_total))
    position = len(results)  # the one the child was on
    if killed:
        raise PatternRefused(
            f"Pattern {position} could not be compiled and tested within {wall_seconds:g} s.",
            position=position,
        )
    # The child died without a word (it cannot start, or a crash): refused, never let through.
    logger.error(
        "The pattern check stopped at pattern %d (exit status %s): %s",
        position,
        done.returncode,
        done.stderr.decode(errors="replace")[-500:].replace(str(patterns[position]), "<pattern>"),
    )
    raise PatternRefused(f"Pattern {position} could not be checked; try again.", position=position)


def _terms_refusal(message: str) -> str:
    """The child's refusal of the terms' alternation, in the words of the ``terms`` field."""
    if "too slowly" in message:
        return (
            f"The terms search too slowly (more than {SEARCH_SECONDS * 1000:.0f} ms on a "
            f"{SAMPLE_CHARS}-character test text); use fewer or shorter terms."
        )
    if "could not" in message:  # the wall-clock bound, or a child that died
        return "The terms could not be compiled and tested in time; try again, or use fewer terms."
    return (
        "The terms are too many or too long: they take more than "
        f"{COMPILE_SECONDS * 1000:.0f} ms or {PROGRAM_BYTES // 1024} KiB to compile (with the "
        f"patterns, {POLICY_COMPILE_SECONDS * 1000:.0f} ms or {POLICY_PROGRAM_BYTES // 1024} KiB); "
        "use fewer or shorter terms."
    )


def _refusal(position: int, refused: str, result: dict) -> str:
    if refused == "syntax":
        where = result.get("pos")
        at = f" at position {where}" if where is not None else ""
        return f"Pattern {position} is not a valid regular expression: {result.get('message')}{at}."
    if refused in ("compile_time", "size"):
        return (
            f"Pattern {position} is too large: compiling it takes more than "
            f"{COMPILE_SECONDS * 1000:.0f} ms or {PROGRAM_BYTES // 1024} KiB (a repetition such as "
            "(?:a{1000}){3000} expands into a huge program)."
        )
    return (
        f"Pattern {position} searches too slowly: more than {SEARCH_SECONDS * 1000:.0f} ms on a "
        f"{SAMPLE_CHARS}-character test text (nested repetitions such as (a+)+$ backtrack without end)."
    )
