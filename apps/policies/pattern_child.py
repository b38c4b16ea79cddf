"""The child process that compiles and test-runs an organization's patterns (``patterns.py`` starts
it and kills it when it runs past its wall-clock limit). Run as a script, ``python -I`` on this
file: it imports nothing but the standard library and ``regex``, never the project or Django.

Reads ``{"patterns": [...], "limits": {...}, "search": [...]}`` on stdin (``search``, optional: per
pattern, whether to test-run it; a policy's terms are escaped words, whose search cannot backtrack)
and writes one JSON line per pattern as it goes (flushed), so the parent knows which pattern it was
on if it has to kill it. It stops at the first pattern it refuses. Time is the process's CPU time
(``ITIMER_PROF``), not the wall clock, so a busy machine does not refuse a pattern a quiet one
accepts; the parent's wall-clock kill bounds the rest. Memory is capped with ``RLIMIT_AS``: a
pattern whose program would not fit fails to compile.
"""

import json
import resource
import signal
import sys
import time

import regex


class OverTime(Exception):
    pass


def _over_time(signum, frame):
    raise OverTime


def _limit(seconds: float) -> None:
    """Raise OverTime in this process once it has used ``seconds`` more CPU time (0: never)."""
    signal.setitimer(signal.ITIMER_PROF, seconds)


def _write(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def samples(source: str, length: int) -> list[str]:
    """Texts that make a backtracking pattern show itself: runs of one character (each of the
    pattern's own letters and digits, and a few classes' typical members) and its literal characters
    in turn, each ended by a character nothing expects, and some prose with numbers and addresses."""
    literals = []
    for character in source:
        if character.isalnum() and character not in literals:
            literals.append(character)
    runs = [*literals[:12], "a", "0", " ", "-", "."]
    texts = [(c * length)[: length - 1] + "\u2603" for c in dict.fromkeys(runs)]
    if literals:
        texts.append(("".join(literals) * length)[: length - 1] + "\u2603")
    prose = (
        "Mail ada@example.com or call +44 20 7946 0958 about ACME-1234 (card 4111 1111 1111 1111), "
        "the 10.0.0.1 host, IBAN GB82 WEST 1234 5698 7654 32; key sk-test_0123456789abcdef. "
    )
    texts.append((prose * (length // len(prose) + 1))[:length])
    return texts


def check(source: str, limits: dict, *, search: bool = True) -> dict:
    """Compiles and test-runs one pattern: the measures, or ``refused`` and why. Called with the
    phase's CPU limit armed; an OverTime that arrives as a phase ends is the caller's to catch."""
    global phase
    phase = "compile_time"
    _limit(limits["compile_seconds"])
    started = time.process_time()
    try:
        pattern = regex.compile(source, cache_pattern=False)
    except (regex.error, OverflowError, RecursionError, ValueError) as error:
        _limit(0)
        return {
            "refused": "syntax",
            "message": getattr(error, "msg", None) or str(error),
            "pos": getattr(error, "pos", None),
        }
    _limit(0)
    compile_seconds = time.process_time() - started
    size = sys.getsizeof(pattern)  # the compiled program, which the proxy keeps in memory
    if size > limits["size_bytes"]:
        return {"refused": "size", "size": size}
    if not search:
        return {"compile": compile_seconds, "search": 0.0, "size": size}
    # A search runs in C, where no signal handler runs until it returns: the ``regex`` package's own
    # timeout (wall clock, checked inside the search) stops it, the timer the rest.
    phase = "search_time"
    budget = limits["search_seconds"]
    started = time.process_time()
    _limit(budget)
    try:
        for text in samples(source, limits["sample_chars"]):
            pattern.search(text, timeout=max(budget - (time.process_time() - started), 1e-6))
    except TimeoutError:
        _limit(0)
        return {"refused": "search_time"}
    _limit(0)
    return {"compile": compile_seconds, "search": time.process_time() - started, "size": size}


phase = "compile_time"


def main() -> None:
    request = json.load(sys.stdin)
    limits = request["limits"]
    memory = limits["memory_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    signal.signal(signal.SIGPROF, _over_time)
    searched = request.get("search") or [True] * len(request["patterns"])
    for index, source in enumerate(request["patterns"]):
        # The timer is one-shot: once it has raised OverTime it is off. It may raise anywhere up to
        # the moment it is disarmed (in the MemoryError handler too), hence the outer ``try``.
        try:
            try:
                result = check(source, limits, search=searched[index])
            except MemoryError:
                _limit(0)
                result = {"refused": "size"}
        except OverTime:
            result = {"refused": phase}
        _write({"index": index, **result})
        if "refused" in result:
            return


if __name__ == "__main__":
    main()
