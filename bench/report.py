"""The benchmark's table, and the generated block of docs/benchmarks.md.

Only the text between the markers below is rewritten; everything around it is for humans and is
kept as it is.
"""

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .footprint import Footprint
from .load import WrkResult
from .sequential import Samples
from .soak import TARGET_GROWTH, Soak

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"

# The targets, and LiteLLM's proxy measured on this machine (docs/benchmarks.md, STACK-NOTES).
TARGET_ADDED_P50_MS = 2.0
TARGET_ADDED_P99_MS = 8.0
TARGET_STREAM_ADDED_MS = 3.0
TARGET_RPS = 600.0
LITELLM_ADDED_P50_MS = 15.0
LITELLM_RPS = 80.0
LITELLM_CPU_MS = 16.0
# Issue 23's targets, and LiteLLM 1.108.7 (one worker, no database) measured there.
TARGET_START_S = 5.0
TARGET_TREE_MIB = 250.0
TARGET_SERVER_MIB = 120.0
LITELLM_START_S = 6.8
LITELLM_IDLE_MIB = 324.0


@dataclass
class Machine:
    when: datetime
    cpus: int
    cpu_model: str
    python: str
    commit: str
    database: str
    redis: str


@dataclass
class ApiCase:
    """One API through the gateway, and the upstream endpoint the gateway calls for it, called directly."""

    name: str
    upstream_path: str
    direct: Samples
    gateway: Samples
    cpu_ms: float  # the Daphne process's CPU per request through the gateway

    def added(self, p: float) -> float:
        return self.gateway.percentile(p) - self.direct.percentile(p)


@dataclass
class ApiCases:
    """The Responses and Messages cases, taking turns in blocks with the chat case."""

    chat: ApiCase
    cases: list[ApiCase]
    others_cores: float  # CPUs other work on the machine used meanwhile


@dataclass
class TracedCase:
    """A second gateway with traces on at 100 % sampling, exporting to a stand-in collector."""

    plain: Samples  # the untraced gateway, alternating with the traced one
    traced: Samples
    plain_cpu_ms: float  # each process's CPU per request over those alternating runs
    traced_cpu_ms: float
    load: WrkResult  # wrk at 32 connections against the traced gateway
    load_cpu_ms: float
    exported_bytes: int
    exports: int


@dataclass
class Results:
    machine: Machine
    requests: int
    stream_requests: int
    seconds: int
    sequential_direct: Samples
    sequential_gateway: Samples
    first_byte_direct: Samples
    first_byte_gateway: Samples
    load_direct: WrkResult
    load_gateway: WrkResult
    gateway_cpu_ms: float  # Daphne's CPU per request during the wrk run
    gateway_cores: float  # how much of a core Daphne used during it
    upstream_cpu_ms: float
    wrk_cores: float  # CPUs wrk used during the gateway's run
    ingest_cores: float  # CPUs the bench's audit ingest used meanwhile
    others_cores: float  # CPUs every other process on the machine used meanwhile
    profile: str | None  # markdown, or None when no profile was taken
    profile_note: str = ""
    daphne_args: str = ""  # BENCH_DAPHNE_ARGS, when a run tries a change
    # The sequential run against a second gateway with GATEWAY_AUDIT_ENABLED=false.
    sequential_gateway_without_audit: Samples | None = None
    # The same requests with a key that has a budget and rate limits, alternating with one without.
    sequential_without_limits: Samples | None = None
    sequential_with_limits: Samples | None = None
    # A stored prompt rendering to the benchmark's request, alternating with the request written out.
    sequential_without_template: Samples | None = None
    sequential_with_template: Samples | None = None
    # A 4,000-token prompt with a key ten policies apply to, alternating with one they do not.
    sequential_without_policies: Samples | None = None
    sequential_with_policies: Samples | None = None
    # Cache hits, each alternating with the same request straight to the upstream.
    l1_direct: Samples | None = None
    l1_hits: Samples | None = None
    l2_direct: Samples | None = None
    l2_hits: Samples | None = None
    # bench/semantic.py's figures: the L3 look-up in process.
    semantic: dict | None = None
    # The Responses and Messages APIs, native and bridged, beside the chat case.
    apis: ApiCases | None = None
    # `make run`: starts, stops and the idle tree (bench/footprint.py); None when skipped.
    footprint: Footprint | None = None
    # The Daphne process's RSS over BENCH_SOAK_REQUESTS requests (bench/soak.py); None when skipped.
    soak: Soak | None = None
    # Traces on at 100 % (OTLP to a stand-in collector), beside the untraced gateway.
    traced: TracedCase | None = None


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def _added_limit(added: float, limit: float) -> str:
    return "yes" if added <= limit else f"**no**, {added - limit:.2f} ms over"


def _at_most(value: float, limit: float, unit: str) -> str:
    return "yes" if value <= limit else f"**no**, {value - limit:,.1f} {unit} over"


def footprint_rows(r: Results) -> list[tuple[str, ...]]:
    """Issue 23's start-up, memory and soak figures, in the main table's columns (the gateway's
    figure in "through gateway"; the direct column does not apply)."""
    rows: list[tuple[str, ...]] = []
    f = r.footprint
    if f is not None:
        rows.append(
            (
                f"`make run` to the first answer, median of {len(f.starts)}",
                "",
                f"{f.median_answer:.2f} s",
                "",
                f"<= {TARGET_START_S:g} s",
                _at_most(f.median_answer, TARGET_START_S, "s"),
                f"{LITELLM_START_S:g} s",
            )
        )
        rows.append(
            (
                f"`make run` stop (SIGTERM to the tree gone), slowest of {len(f.starts)}",
                "",
                f"{f.slowest_stop:.2f} s" if f.slowest_stop is not None else "killed after 30 s",
                "",
                "",
                "",
                "",
            )
        )
        if f.processes:
            rows.append(
                (
                    "idle memory, the `make run` tree (RSS)",
                    "",
                    f"{f.rss_mib:.0f} MiB in {len(f.processes)} processes",
                    "",
                    f"<= {TARGET_TREE_MIB:g} MiB",
                    _at_most(f.rss_mib, TARGET_TREE_MIB, "MiB"),
                    f"{LITELLM_IDLE_MIB:g} MiB in 1 process",
                )
            )
            server = f.server
            rows.append(
                (
                    "idle memory, the server process (RSS)",
                    "",
                    f"{server.rss_mib:.0f} MiB" if server else "not found",
                    "",
                    f"<= {TARGET_SERVER_MIB:g} MiB",
                    _at_most(server.rss_mib, TARGET_SERVER_MIB, "MiB") if server else "",
                    "",
                )
            )
    k = r.soak
    if k is not None:
        rows.append(
            (
                f"Daphne RSS after {k.first.requests:,} and {k.requests:,} requests",
                "",
                f"{k.first.rss_mib:.0f}, {k.rest.rss_mib:.0f} MiB ({k.growth:+.1%})",
                "",
                f"within {TARGET_GROWTH:.0%}",
                "yes" if k.met else f"**no**, {k.growth - TARGET_GROWTH:.1%} over",
                "",
            )
        )
    return rows


def table(r: Results) -> str:
    seq_d, seq_g = r.sequential_direct, r.sequential_gateway
    ttfb_d, ttfb_g = r.first_byte_direct, r.first_byte_gateway
    added_p50 = seq_g.percentile(50) - seq_d.percentile(50)
    added_p99 = seq_g.percentile(99) - seq_d.percentile(99)
    stream_p50 = ttfb_g.percentile(50) - ttfb_d.percentile(50)
    stream_p99 = ttfb_g.percentile(99) - ttfb_d.percentile(99)
    rps = r.load_gateway.requests_per_second
    rps_met = (
        "yes" if rps >= TARGET_RPS else f"**no**, {TARGET_RPS - rps:.0f}/s short ({rps / TARGET_RPS:.0%})"
    )
    rows = [
        ("measure", "upstream direct", "through gateway", "gateway adds", "target", "met", "LiteLLM (ref.)"),
        ("---", "---:", "---:", "---:", "---", "---", "---:"),
        (
            "sequential latency p50",
            _ms(seq_d.percentile(50)),
            _ms(seq_g.percentile(50)),
            f"+{_ms(added_p50)}",
            f"<= {TARGET_ADDED_P50_MS:g} ms added",
            _added_limit(added_p50, TARGET_ADDED_P50_MS),
            f"+{LITELLM_ADDED_P50_MS:g} ms",
        ),
        (
            "sequential latency p99",
            _ms(seq_d.percentile(99)),
            _ms(seq_g.percentile(99)),
            f"+{_ms(added_p99)}",
            f"<= {TARGET_ADDED_P99_MS:g} ms added",
            _added_limit(added_p99, TARGET_ADDED_P99_MS),
            "",
        ),
        (
            "stream first byte p50",
            _ms(ttfb_d.percentile(50)),
            _ms(ttfb_g.percentile(50)),
            f"+{_ms(stream_p50)}",
            f"<= {TARGET_STREAM_ADDED_MS:g} ms added",
            _added_limit(stream_p50, TARGET_STREAM_ADDED_MS),
            "",
        ),
        (
            "stream first byte p99",
            _ms(ttfb_d.percentile(99)),
            _ms(ttfb_g.percentile(99)),
            f"+{_ms(stream_p99)}",
            "",
            "",
            "",
        ),
        (
            "requests/s, 32 connections",
            f"{r.load_direct.requests_per_second:,.0f}",
            f"{rps:,.0f}",
            "",
            f">= {TARGET_RPS:g}/s per process",
            rps_met,
            f"~{LITELLM_RPS:g}/s",
        ),
        (
            "latency p50, 32 connections",
            _ms(r.load_direct.p50_ms),
            _ms(r.load_gateway.p50_ms),
            "",
            "",
            "",
            "",
        ),
        (
            "latency p99, 32 connections",
            _ms(r.load_direct.p99_ms),
            _ms(r.load_gateway.p99_ms),
            "",
            "",
            "",
            "",
        ),
        (
            "CPU per request",
            _ms(r.upstream_cpu_ms),
            _ms(r.gateway_cpu_ms),
            "",
            "",
            "",
            f"~{LITELLM_CPU_MS:g} ms",
        ),
        *footprint_rows(r),
    ]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def context(r: Results) -> str:
    m = r.machine
    return (
        f"{m.when:%Y-%m-%d %H:%M} UTC; {m.cpus} CPUs ({m.cpu_model}); Python {m.python}; commit {m.commit}; "
        f"database: {m.database}; Redis: {m.redis}. {r.requests:,} sequential requests and "
        f"{r.stream_requests:,} sequential streams each way; wrk -t2 -c32 for {r.seconds} s each way "
        f"({r.load_gateway.requests:,} requests through the gateway)."
        + (f" Daphne ran with the extra arguments `{r.daphne_args}`." if r.daphne_args else "")
    )


def notes(r: Results) -> str:
    ceiling = 1000 / r.gateway_cpu_ms if r.gateway_cpu_ms else float("inf")
    return (
        f"During the gateway's wrk run the Daphne process used {r.gateway_cores:.2f} of a CPU, "
        f"{r.gateway_cpu_ms:.2f} ms of CPU per request: with its Python code on one core (the GIL), one "
        f"process serves at most about {ceiling:,.0f} requests/s on this CPU, however many cores the "
        f"machine has. Meanwhile wrk used "
        f"{r.wrk_cores:.2f} CPUs, the stand-in upstream {r.upstream_cpu_ms:.2f} ms per request, the audit "
        f"ingest (at `nice` 10, as `make run` starts it) {r.ingest_cores:.2f} CPUs, and "
        f"other processes on the machine {r.others_cores:.2f} CPUs (more than about 0.2 makes every "
        f"number here noisy). The direct column's CPU per request is the upstream's."
    )


def traced_note(r: Results) -> str:
    t = r.traced
    if t is None:
        return ""
    added = t.traced.percentile(50) - t.plain.percentile(50)
    return (
        "What traces cost (OpenTelemetry at 100 % sampling, OTLP/HTTP to a stand-in collector; a "
        "request's SERVER span, its upstream attempt's CLIENT span and the admission span): the same "
        "sequential requests, alternating in blocks between a traced and an untraced gateway, took p50 "
        f"{t.traced.percentile(50):.2f} ms against {t.plain.percentile(50):.2f} ms ({added:+.2f} ms), "
        f"and {t.traced_cpu_ms:.2f} ms of CPU per request against {t.plain_cpu_ms:.2f} ms "
        f"({t.traced_cpu_ms - t.plain_cpu_ms:+.2f} ms, the SDK's batch export included). Under load (32 "
        f"connections) the traced gateway served {t.load.requests_per_second:,.0f} requests/s at "
        f"{t.load_cpu_ms:.2f} ms of CPU per request (the untraced one: "
        f"{r.load_gateway.requests_per_second:,.0f} requests/s at {r.gateway_cpu_ms:.2f} ms); "
        f"the collector took {t.exports:,} exports, {t.exported_bytes / 1e6:,.1f} MB in all."
    )


def audit_note(r: Results) -> str:
    off = r.sequential_gateway_without_audit
    if off is None:
        return ""
    on = r.sequential_gateway
    return (
        "What the audit path costs a request: the same sequential run against a gateway with "
        f"`GATEWAY_AUDIT_ENABLED=false` took p50 {off.percentile(50):.2f} ms and p99 "
        f"{off.percentile(99):.2f} ms, against {on.percentile(50):.2f} ms and {on.percentile(99):.2f} ms "
        f"with it ({on.percentile(50) - off.percentile(50):+.2f} ms at p50, "
        f"{on.percentile(99) - off.percentile(99):+.2f} ms at p99)."
    )


LIMITS_P50_TARGET_MS = 0.5


def limits_note(r: Results) -> str:
    without, with_ = r.sequential_without_limits, r.sequential_with_limits
    if without is None or with_ is None:
        return ""
    added = with_.percentile(50) - without.percentile(50)
    return (
        "What a budget and rate limits on the key add (admission's one Redis round trip: revocation, "
        "generation, both limits and the budget reservation; the settle after the answer): the same "
        "sequential requests, alternating in blocks between a key with a budget and rate limits and "
        f"one without, took p50 {with_.percentile(50):.2f} ms and p99 {with_.percentile(99):.2f} ms "
        f"against {without.percentile(50):.2f} ms and {without.percentile(99):.2f} ms "
        f"({added:+.2f} ms at p50; target within {LIMITS_P50_TARGET_MS} ms: "
        f"{_added_limit(added, LIMITS_P50_TARGET_MS)})."
    )


TEMPLATE_P50_TARGET_MS = 0.3
POLICIES_P50_TARGET_MS = 1.0
L1_HIT_P50_TARGET_MS = 1.0


def policies_and_cache_note(r: Results) -> str:
    parts = []
    plain, templated = r.sequential_without_template, r.sequential_with_template
    if plain is not None and templated is not None:
        added = templated.percentile(50) - plain.percentile(50)
        parts.append(
            "What a prompt template adds (a stored prompt rendered into the request from the "
            "configuration in memory): the benchmark's request named as a template, alternating with the "
            f"same request written out, took p50 {templated.percentile(50):.2f} ms against "
            f"{plain.percentile(50):.2f} ms ({added:+.2f} ms; target within {TEMPLATE_P50_TARGET_MS} ms: "
            f"{_added_limit(added, TEMPLATE_P50_TARGET_MS)})."
        )
    without, with_ = r.sequential_without_policies, r.sequential_with_policies
    if without is not None and with_ is not None:
        added = with_.percentile(50) - without.percentile(50)
        parts.append(
            "What ten active policies add (each request's text read once per rule of their scanner, "
            "an e-mail address and a phone number redacted): the same 4,000-token prompt, alternating "
            "between a key the policies apply to and one they do not, took p50 "
            f"{with_.percentile(50):.2f} ms against {without.percentile(50):.2f} ms ({added:+.2f} ms; "
            f"target under {POLICIES_P50_TARGET_MS} ms: {_added_limit(added, POLICIES_P50_TARGET_MS)})."
        )
    for tier, direct, hits in (("L1", r.l1_direct, r.l1_hits), ("L2", r.l2_direct, r.l2_hits)):
        if direct is None or hits is None:
            continue
        added = hits.percentile(50) - direct.percentile(50)
        target = (
            f"; target under {L1_HIT_P50_TARGET_MS} ms: {_added_limit(added, L1_HIT_P50_TARGET_MS)}"
            if tier == "L1"
            else ""
        )
        parts.append(
            f"An {tier} cache hit (the request at temperature 0, answered from "
            f"{'the process' if tier == 'L1' else 'Redis, by a gateway process without L1'}), alternating "
            f"with the same request straight to the upstream: p50 {hits.percentile(50):.2f} ms against "
            f"{direct.percentile(50):.2f} ms ({added:+.2f} ms{target})."
        )
    l3 = r.semantic
    if l3:
        parts.append(
            f"The L3 look-up (bench/semantic.py, in process, {l3['entries']:,} entries of "
            f"{l3['dimensions']:,} dimensions): a miss p50 {l3['miss_p50_ms']:.2f} ms (p99 "
            f"{l3['miss_p99_ms']:.2f} ms), a hit, its answer read from the database, p50 "
            f"{l3['hit_p50_ms']:.2f} ms (p99 {l3['hit_p99_ms']:.2f} ms); loading the entries the first "
            f"time {l3['load_ms']:.0f} ms. The embeddings call an L3 look-up makes first is not included."
        )
    return " ".join(parts)


NOISY_CPUS = 0.2  # other processes' CPU during the measured run above which the numbers drift
API_AGAINST_CHAT_P50_TARGET_MS = 0.2


def apis_section(a: ApiCases) -> str:
    """The Responses and Messages cases: what the gateway adds to each, beside what it adds to chat."""
    chat_p50 = a.chat.added(50)
    rows = [
        (
            "case",
            "upstream endpoint called",
            "upstream direct p50",
            "through gateway p50",
            "gateway adds p50",
            "gateway adds p99",
            "against chat, p50",
            f"within {API_AGAINST_CHAT_P50_TARGET_MS} ms",
            "gateway CPU per request",
            "against chat",
        ),
        ("---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:", "---:"),
    ]
    for case in (a.chat, *a.cases):
        against = case.added(50) - chat_p50
        rows.append(
            (
                case.name,
                f"`{case.upstream_path}`",
                _ms(case.direct.percentile(50)),
                _ms(case.gateway.percentile(50)),
                f"+{_ms(case.added(50))}",
                f"+{_ms(case.added(99))}",
                "" if case is a.chat else f"{against:+.2f} ms",
                "" if case is a.chat else _added_limit(against, API_AGAINST_CHAT_P50_TARGET_MS),
                _ms(case.cpu_ms),
                "" if case is a.chat else f"{case.cpu_ms - a.chat.cpu_ms:+.2f} ms",
            )
        )
    noise = (
        f" **Other processes used {a.others_cores:.2f} CPUs meanwhile: noisy figures; compare on a quiet "
        "machine.**"
        if a.others_cores > NOISY_CPUS
        else f" Other processes used {a.others_cores:.2f} CPUs meanwhile."
    )
    lead = (
        "What the gateway adds to OpenAI's Responses API and Anthropic's Messages API, each native "
        "(passed through) and bridged (over chat completions), beside what it adds to the chat case: "
        f"{len(a.chat.gateway.seconds):,} sequential requests each, the same short prompt, whole answers, "
        "every case, the chat case and each upstream endpoint called directly taking turns in blocks. "
        "Each case's added latency is over the upstream endpoint the gateway calls for it (a bridged "
        "Responses request reaches Anthropic's `/v1/messages`, a bridged Messages request OpenAI's "
        "`/v1/chat/completions`). The Responses requests send `store: false`: keeping a conversation's "
        "turns is not measured here, nor are these APIs' streams. The gateway's CPU per request is the "
        "Daphne process's in each case's blocks: other work on the machine moves it far less than the "
        "latencies." + noise
    )
    table_text = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    return f"{lead}\n\n{table_text}"


def footprint_section(f: Footprint) -> str:
    """Each timed start and stop of `make run`, and its idle tree process by process."""
    starts = "; ".join(
        f"{s.answer_seconds:.2f} s (the server process spawned after "
        + (f"{s.server_spawned_seconds:.2f} s" if s.server_spawned_seconds is not None else "?")
        + f", listening after {s.listening_seconds:.2f} s, the tree idle after "
        + (f"{s.settled_seconds:.0f} s" if s.settled_seconds is not None else "more than 90 s")
        + (f", stopped in {s.stop_seconds:.2f} s)" if s.stop_seconds is not None else ", **killed**)")
        for s in f.starts
    )
    slowest = (
        f"{f.slowest_stop:.2f} s"
        if f.slowest_stop is not None
        else "**a start was still running 30 s after SIGTERM and was killed**"
    )
    lead = (
        f"`make run` on an installed and migrated tree, in {f.layout} with its own data directory, "
        f"{'once' if len(f.starts) == 1 else f'{len(f.starts)} times'}: from spawning `make run` to "
        "the first 200 of a proxied chat completion "
        f"(polled every 20 ms), median **{f.median_answer:.2f} s** (target <= {TARGET_START_S:g} s; "
        f"LiteLLM {LITELLM_START_S:g} s); each start {starts}. Until the server process is spawned (its "
        "start time in /proc against `make`'s) the time is `make`'s own steps (install check, migrate, "
        "first admin, collectstatic, the start script); from then until it listens (its first accepted "
        'connection), the server\'s imports and set-up; after that, the first request. "Idle" is when the '
        "tree had kept the same processes and used under 5 % of a core for 2 s (the Celery worker "
        "starts on after the server answers); each start was stopped only then, with SIGTERM to the "
        f"process group, timed until no process of it was left: the slowest stop: {slowest}."
    )
    if not f.processes:
        return lead
    server = f.server
    rows = [
        ("process", "pid", "parent", "RSS", "PSS"),
        ("---", "---:", "---:", "---:", "---:"),
        *(
            (
                f"**{p.name}** (the server)" if p is server else p.name,
                str(p.pid),
                str(p.parent),
                f"{p.rss_mib:.1f} MiB",
                f"{p.pss_mib:.1f} MiB",
            )
            for p in f.processes
        ),
        (
            "**the tree**",
            "",
            "",
            f"**{f.rss_mib:.1f} MiB** (target <= {TARGET_TREE_MIB:g})",
            f"**{f.pss_mib:.1f} MiB**",
        ),
    ]
    memory = (
        f"The last start's process tree, after {f.idle_requests} proxied requests and {f.idle_seconds:g} s "
        "idle, walked in /proc from the `make` process: RSS from `/proc/<pid>/status`, PSS (pages shared "
        "with a parent or a forked child shared out: what the tree really costs) from "
        "`/proc/<pid>/smaps_rollup`. The server is the process holding the listening socket"
        + (
            f": {server.rss_mib:.1f} MiB RSS (target <= {TARGET_SERVER_MIB:g} MiB)."
            if server
            else "; none was found."
        )
    )
    table_text = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    return f"{lead}\n\n{memory}\n\n{table_text}"


def soak_note(k: Soak) -> str:
    return (
        f"The soak (bench/soak.py): {k.requests:,} requests to the same Daphne process after the cases "
        f"above, every fourth streamed ({k.streams:,} streams), wrk at 32 connections, "
        f"{k.requests / k.seconds:,.0f} requests/s over {k.seconds:.0f} s. Its RSS was "
        f"{k.rss_before_mib:.1f} MiB before, {k.first.rss_mib:.1f} MiB after the first "
        f"{k.first.requests:,} and {k.rest.rss_mib:.1f} MiB after all {k.requests:,}: **{k.growth:+.1%}** "
        f"(target within {TARGET_GROWTH:.0%}: {'yes' if k.met else '**no**'})."
    )


def block(r: Results) -> str:
    warning = (
        f"**A noisy run: other processes used {r.others_cores:.2f} CPUs during it; run again on a "
        "quiet machine before comparing.**\n\n"
        if r.others_cores > NOISY_CPUS
        else ""
    )
    parts = [
        "### Latest run",
        "",
        warning + context(r),
        "",
        table(r),
        "",
        notes(r),
        "",
        audit_note(r),
        "",
        *([traced_note(r), ""] if r.traced else []),
        limits_note(r),
        "",
        policies_and_cache_note(r),
        "",
        *(["#### The Responses and Messages APIs", "", apis_section(r.apis), ""] if r.apis else []),
        *(
            ["#### Start-up, stop and idle memory of `make run`", "", footprint_section(r.footprint), ""]
            if r.footprint
            else []
        ),
        *(["#### The soak", "", soak_note(r.soak), ""] if r.soak else []),
        "### Profile of the latest run",
        "",
        r.profile
        if r.profile
        else f"_No profile this run{': ' + r.profile_note if r.profile_note else ''}._",
    ]
    return "\n".join(parts)


SKELETON = """# Benchmarks

How much the gateway adds to a request, measured by `make bench` against a zero-latency upstream.

## How to run

    make bench

{generated}
"""


def write_doc(path: Path, generated_block: str) -> None:
    generated = (
        f"{BEGIN}\n<!-- Written by `make bench` (bench/run.py): edits between these markers are "
        f"overwritten. -->\n\n{generated_block}\n\n{END}"
    )
    if not path.exists():
        path.write_text(SKELETON.format(generated=generated))
        return
    text = path.read_text()
    start = text.find(BEGIN)
    end = text.find(END, start)
    if start == -1 or end == -1:
        text = text.rstrip() + "\n\n" + generated + "\n"  # keep what is there; add the block below
    else:
        text = text[:start] + generated + text[end + len(END) :]
    path.write_text(text)
