"""Where the gateway's CPU goes: py-spy samples of the Daphne process while wrk loads it.

py-spy's raw output is one line per distinct stack, ``frame;frame;...;frame count``, each frame
``function (path:line)`` with the path relative to its sys.path entry (``twisted/web/http.py``,
``apps/proxy/app.py``, ``asyncio/events.py``), which is enough to name the package.
"""

import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

OWN_CODE = ("apps", "gateway_project")

# Which layer of the request path a package belongs to. Packages not named here (the standard
# library's email, json, uuid, logging ...) are helpers: their samples count for the layer that
# called them, which is what a reader can change.
LAYERS = {
    "twisted": "HTTP server (Twisted, Daphne)",
    "daphne": "HTTP server (Twisted, Daphne)",
    "channels": "HTTP server (Twisted, Daphne)",
    "constantly": "HTTP server (Twisted, Daphne)",
    "zope": "HTTP server (Twisted, Daphne)",
    "aiohttp": "upstream client (aiohttp)",
    "multidict": "upstream client (aiohttp)",
    "yarl": "upstream client (aiohttp)",
    "propcache": "upstream client (aiohttp)",
    "aiohappyeyeballs": "upstream client (aiohttp)",
    "apps": "the gateway's code (apps/)",
    "gateway_project": "the gateway's code (apps/)",
    "redis": "Redis client (redis.asyncio), when REDIS_URL is set",
    "django": "Django (ORM, settings, timezone)",
    "asgiref": "Django (ORM, settings, timezone)",
    "asyncio": "event loop and sockets (asyncio)",
    "selectors": "event loop and sockets (asyncio)",
    "socket": "event loop and sockets (asyncio)",
}


@dataclass
class Profile:
    samples: int = 0
    self_by_package: Counter = field(default_factory=Counter)
    by_layer: Counter = field(default_factory=Counter)
    self_by_function: Counter = field(default_factory=Counter)
    inclusive_own: Counter = field(default_factory=Counter)  # the gateway's own functions
    crossings: Counter = field(default_factory=Counter)  # "caller (path) -> package"

    def share(self, count: int) -> float:
        return 100 * count / self.samples if self.samples else 0.0


def py_spy() -> str | None:
    """py-spy from the venv (the `bench` extra) or the PATH; None when it is not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def start_recording(py_spy_path: str, pid: int, seconds: int, output: Path, log: Path) -> subprocess.Popen:
    """Starts sampling ``pid``; the caller loads the process meanwhile and waits on the result."""
    command = [
        py_spy_path,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(seconds),
        "--rate",
        "250",
        "--format",
        "raw",
        "--function",  # aggregate by function, not by line
        # Sampling without pausing the process: paused threads all look busy, idle pool threads included.
        "--nonblocking",
        "--output",
        str(output),
    ]
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)  # noqa: S603


def _frame(frame: str) -> tuple[str, str]:
    """(function name, path) of one ``function (path:line)`` frame."""
    name, _, location = frame.rpartition(" (")
    path = location.rsplit(":", 1)[0] if location else "?"
    return name or frame, path


def package_of(path: str) -> str:
    """The package a frame belongs to: the module path for the gateway's own code (that is what a
    reader would open), the top-level package for everything else."""
    parts = path.split("/")
    if parts[0] in OWN_CODE:
        return path
    if path.startswith("<"):
        return path  # <frozen ...>, <string>
    return parts[0].removesuffix(".py")


def layer_of(frames: list[tuple[str, str]]) -> str:
    """The layer of the innermost frame that belongs to one, walking out from the leaf."""
    for _name, path in reversed(frames):
        layer = LAYERS.get(path.split("/")[0].removesuffix(".py"))
        if layer:
            return layer
    return "other"


def _top(path: str) -> str:
    return path.split("/")[0].removesuffix(".py")


# Callers whose calls into other packages are dispatch, not work: the event loop running
# callbacks, the interpreter starting the program.
_DISPATCHERS = frozenset({"asyncio", "<frozen runpy>", "threading"})


def _crossings(frames: list[tuple[str, str]]) -> set[str]:
    """Where a function of one package calls into another (the callee's time, inclusive): the
    places where a cost enters, e.g. Twisted parsing a header with the email package."""
    found = set()
    for (caller, caller_path), (_callee, callee_path) in pairwise(frames):
        source, target = _top(caller_path), _top(callee_path)
        if source != target and source not in _DISPATCHERS:
            found.add(f"{caller} ({caller_path}) -> {target}")
    return found


def parse(raw: str) -> Profile:
    profile = Profile()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(frame) for frame in stack.split(";")]
        profile.samples += count
        leaf_name, leaf_path = frames[-1]
        profile.self_by_package[package_of(leaf_path)] += count
        profile.by_layer[layer_of(frames)] += count
        profile.self_by_function[f"{leaf_name} ({leaf_path})"] += count
        own = {f"{name} ({path})" for name, path in frames if path.split("/")[0] in OWN_CODE}
        for function in own:  # once per sample, however deep the recursion
            profile.inclusive_own[function] += count
        for crossing in _crossings(frames):
            profile.crossings[crossing] += count
    return profile


def headline(profile: Profile) -> str:
    """One line for the console: the CPU by layer."""
    layers = ", ".join(
        f"{name} {profile.share(count):.0f}%" for name, count in profile.by_layer.most_common()
    )
    return f"CPU by layer: {layers}"


def summary(profile: Profile, *, top: int = 12) -> str:
    """Markdown: self time by package, the hottest functions, and the gateway's own functions
    with what they call (inclusive), each as a share of all samples."""
    if not profile.samples:
        return "_The profile recorded no samples._"

    def rows(counter: Counter, n: int) -> str:
        return "\n".join(
            f"| {name} | {profile.share(count):.1f}% |" for name, count in counter.most_common(n)
        )

    return "\n".join(
        [
            f"{profile.samples:,} samples of the Daphne process (py-spy, 250 Hz, idle time excluded).",
            "",
            "CPU by layer (a sample counts for the innermost layer on its stack; standard-library helpers "
            "such as email or json count for the layer that called them):",
            "",
            "| layer | share of samples |",
            "| --- | ---: |",
            rows(profile.by_layer, top),
            "",
            "CPU by package (self time: the frame on top of the stack):",
            "",
            "| package | share of samples |",
            "| --- | ---: |",
            rows(profile.self_by_package, top),
            "",
            "Hottest functions (self time):",
            "",
            "| function | share of samples |",
            "| --- | ---: |",
            rows(profile.self_by_function, top),
            "",
            "The gateway's own code, including everything it calls:",
            "",
            "| function | share of samples |",
            "| --- | ---: |",
            rows(profile.inclusive_own, top),
            "",
            "Calls from one package into another, with everything below them (where a cost enters; "
            "the server's and the router's outer calls, on most stacks, left out):",
            "",
            "| caller -> package called | share of samples |",
            "| --- | ---: |",
            rows(Counter({k: v for k, v in profile.crossings.items() if v < profile.samples * 0.3}), top),
        ]
    )
