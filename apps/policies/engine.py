"""The policies on the hot path: pure Python over plain data, no database.

``PolicyEngine.build(snapshots)`` runs once per configuration generation of an organization, in the
thread that loads the configuration (``apps/proxy/config.py``), never on the event loop. Each
policy's detectors, patterns and terms become rules, every one compiled there and then (shared by
the policies that name the same one); for each distinct set of policies that applies to a request
(scope: teams, keys, models) the engine hands their compiled rules to one
``apps/core/detectors.Scanner``, cached in the engine: a request compiles nothing. Where two rules
match at the same place, the rule of the earlier policy takes it.

A policy's patterns and terms are compiled only when they passed the save-time check
(``patterns.py``; ``PolicySnapshot.rules_checked``): ones that did not (stored before the check
existed, or written around the services) are never compiled, and the requests their policy applies
to are blocked with the category ``unchecked_pattern`` (fail closed, like a scan that runs out of
time); so are a policy past the organization's bound (``ACTIVE_POLICIES_LIMIT``, the compile time
and size the checks measured), with the category ``organization_limit``.

Every scan of one request shares one deadline (``GATEWAY_POLICY_TIMEOUT_SECONDS``, handed to the
``regex`` package's ``timeout=``): a request whose scan does not finish is blocked with the category
``timeout`` (fail closed); an answer whose scan does not finish has that text replaced by
``[REDACTED:timeout]``.
"""

import base64
import codecs
import gc
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

import regex
from django.conf import settings

from apps.catalog.pricing import is_snapshot_of
from apps.core.detectors import Match, Rule, Scanner, ScanTimeout, compiled_rule, detector, replace

from .patterns import ACTIVE_POLICIES_LIMIT, RulesCost, organization_refusal, term_source

logger = logging.getLogger(__name__)

BLOCKED, REDACTED, FLAGGED = "blocked", "redacted", "flagged"
_ACTION_OF = {"block": BLOCKED, "redact": REDACTED, "flag": FLAGGED}
CHAT, EMBEDDINGS, RESPONSES, MESSAGES = "chat.completions", "embeddings", "responses", "messages"
REASON_LIMIT = 200
NAME_LIMIT = 200
TIMEOUT = "timeout"
UNCHECKED_PATTERN = "unchecked_pattern"
OVER_LIMIT = "organization_limit"
DENIED_MODEL = "denied_model"
PROMPT_TOO_LONG = "max_prompt_chars"
# A decision's category for people (the console); the API and the headers keep the ids. The
# detectors' own labels are beside them (apps/core/detectors.py DETECTOR_LABELS).
CATEGORY_LABELS = {
    "pattern": "Custom pattern",
    "term": "Denied term",
    DENIED_MODEL: "Denied model",
    PROMPT_TOO_LONG: "Prompt too long",
    TIMEOUT: "Check timed out",
    UNCHECKED_PATTERN: "Pattern not checked",
    OVER_LIMIT: "Beyond the organization's policy limit",
}
# A stream holds back at most this much of each choice's text (a match may still grow into what
# comes next); a longer match is released redacted as far as it has come.
STREAM_HOLD_LIMIT = 256
# What a stream keeps of the text it released, for the lookbehinds at the start of the held text.
_STREAM_CONTEXT = 80
_COMPILED_SETS_LIMIT = 256
_MODELS_LIMIT = 1024
# Strings this short (roles, types, keys, enumerations) repeat from request to request: their scan
# results are kept per compiled set, up to _MEMO_LIMIT of them.
_MEMO_CHARS = 64
_MEMO_LIMIT = 4096


def marker(key: str) -> str:
    return f"[REDACTED:{key}]"


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """What the proxy holds of a policy (``selectors.active_policy_snapshots``)."""

    id: str
    name: str
    action: str  # redact | block | flag
    detectors: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()
    denied_models: frozenset[str] = frozenset()
    max_prompt_chars: int | None = None
    apply_to_response: bool = False
    # The patterns and terms passed the save-time check (their digest matches): only then are they
    # compiled, and their measures from the check count towards the organization's bound.
    rules_checked: bool = False
    compile_micros: int = 0
    program_bytes: int = 0
    teams: frozenset[str] = frozenset()
    api_keys: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()

    def applies_to(self, *, team_id: str | None, api_key_id: str) -> bool:
        """The team and key scope; the model scope is the engine's (it resolves deployments)."""
        return (not self.teams or (team_id is not None and str(team_id) in self.teams)) and (
            not self.api_keys or str(api_key_id) in self.api_keys
        )


Deployment = tuple[str, str]  # (provider, upstream model in lower case)


def _deployment(provider: str, upstream_model: str) -> Deployment:
    # Compared without case or surrounding spaces: a spelling an upstream may treat as the same model
    # must not slip past a scope (matching one spelling too many only applies a policy more often).
    return provider, upstream_model.strip().casefold()


def _same_model(reached: frozenset[Deployment], named: frozenset[Deployment]) -> bool:
    """Whether a deployment a request may reach is one a policy names, or a dated snapshot (or
    "-latest") of it, or the bare name of a snapshot it names (that name may be served by it): the
    rule prices use (``apps.catalog.pricing.is_snapshot_of``), so ``openai/o3-2025-04-16`` is
    ``openai/o3`` for a policy as it is for a price. Two different snapshots are not the same."""
    if reached & named:
        return True
    return any(
        provider == other and (is_snapshot_of(model, named_model) or is_snapshot_of(named_model, model))
        for provider, model in reached
        for other, named_model in named
    )


@dataclass(frozen=True)
class ModelCatalog:
    """What the engine knows of the organization's models, to match a policy's ``scope.models`` and
    ``denied_models`` on deployments rather than on the name a request spells: an alias's own
    deployments, the deployments a request for it may reach (its own, then its fallbacks', as
    routing tries them), and the providers a ``provider/model`` name may start with."""

    own: Mapping[str, frozenset[Deployment]] = field(default_factory=dict)
    reachable: Mapping[str, frozenset[Deployment]] = field(default_factory=dict)
    providers: frozenset[str] = frozenset()

    @classmethod
    def from_aliases(cls, aliases: Iterable, providers: Iterable[str]) -> "ModelCatalog":
        """``aliases``: objects with ``alias``, ``deployments`` (``provider``, ``upstream_model``) and
        ``fallbacks`` (``apps.catalog.selectors.AliasSnapshot``)."""
        by_name = {alias.alias: alias for alias in aliases}
        own = {
            name: frozenset(_deployment(d.provider, d.upstream_model) for d in alias.deployments)
            for name, alias in by_name.items()
        }
        reachable = {
            name: own[name].union(*(own[f] for f in alias.fallbacks if f in own))
            for name, alias in by_name.items()
        }
        return cls(own=own, reachable=reachable, providers=frozenset(providers))

    def deployments(self, name: str, *, reach: bool) -> frozenset[Deployment]:
        """The deployments ``name`` names (an alias wins over a ``provider/model`` reading, as in
        routing); with ``reach``, also those a request for it may fall back to."""
        found = (self.reachable if reach else self.own).get(name)
        if found is not None:
            return found
        provider, slash, upstream_model = name.partition("/")
        if slash and provider in self.providers and upstream_model.strip():
            return frozenset({_deployment(provider, upstream_model)})
        return frozenset()


EMPTY_CATALOG = ModelCatalog()


@dataclass(frozen=True, slots=True)
class Decision:
    policy_id: str
    policy: str
    action: str  # redacted | blocked | flagged
    category: str  # a detector's name, pattern, term, denied_model, max_prompt_chars, timeout
    count: int

    def as_record(self) -> dict:
        """The audit entry's shape (what ``apps/audit`` analytics counts), lengths bounded."""
        return {
            "policy": self.policy[:NAME_LIMIT],
            "action": self.action,
            "category": self.category[:64],
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class RequestVerdict:
    body: dict
    decisions: tuple[Decision, ...] = ()
    blocked: Decision | None = None
    action: str | None = None  # the x-gateway-policy-action value
    reason: str | None = None  # the x-gateway-policy-reason value

    @property
    def changed(self) -> bool:
        return any(decision.action == REDACTED for decision in self.decisions)


@dataclass(eq=False)
class _Compiled:
    scanner: Scanner
    owners: tuple[tuple[int, ...], ...]  # per scanner rule: the policies (indices) that own it
    memo: dict[str, list[Match]] = field(default_factory=dict)

    def scan(self, text: str, deadline: float) -> list[Match]:
        if len(text) > _MEMO_CHARS:
            return self.scanner.scan(text, deadline=deadline)
        found = self.memo.get(text)
        if found is None:
            found = self.scanner.scan(text, deadline=deadline)
            if len(self.memo) >= _MEMO_LIMIT:
                self.memo.clear()
            self.memo[text] = found
        return found


@dataclass(eq=False)
class PolicyEngine:
    policies: tuple[PolicySnapshot, ...]
    timeout: float
    # Every distinct rule, compiled, with the policies (indices) that own it.
    _rules: list[tuple[Rule, regex.Pattern, tuple[int, ...]]] = field(default_factory=list, repr=False)
    # Policies whose patterns or terms were never checked, or that are past the organization's
    # bound: they block the requests they apply to (with UNCHECKED_PATTERN, OVER_LIMIT).
    _unchecked: frozenset[int] = frozenset()
    _over_limit: frozenset[int] = frozenset()
    catalog: ModelCatalog = EMPTY_CATALOG
    # Per policy: the deployments its scope.models and its denied_models name.
    _scope_deployments: tuple[frozenset[Deployment], ...] = ()
    _denied_deployments: tuple[frozenset[Deployment], ...] = ()
    # model name -> (the policies whose model scope admits it, the policies that deny it)
    _by_model: dict[str, tuple[frozenset[int], frozenset[int]]] = field(default_factory=dict, repr=False)
    _sets: dict[tuple, _Compiled] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        snapshots: Sequence[PolicySnapshot],
        *,
        timeout: float | None = None,
        catalog: ModelCatalog = EMPTY_CATALOG,
    ) -> "PolicyEngine":
        engine = cls(
            policies=tuple(snapshots),
            timeout=settings.GATEWAY_POLICY_TIMEOUT_SECONDS if timeout is None else timeout,
            catalog=catalog,
        )
        engine._index_rules()
        engine._scope_deployments = tuple(engine._named(p.models) for p in engine.policies)
        engine._denied_deployments = tuple(engine._named(p.denied_models) for p in engine.policies)
        return engine

    def _named(self, names: Iterable[str]) -> frozenset[Deployment]:
        return frozenset().union(*(self.catalog.deployments(name, reach=False) for name in names))

    def _model_policies(self, model: str) -> tuple[frozenset[int], frozenset[int]]:
        """(policies whose model scope admits ``model``, policies that deny it): by its name, or by
        any deployment a request for it may reach, so every spelling of a deployment (an alias,
        ``provider/model``, an alias that falls back to it) is caught both ways."""
        found = self._by_model.get(model)
        if found is None:
            reach = self.catalog.deployments(model, reach=True)
            admitted, denied = set(), set()
            for index, policy in enumerate(self.policies):
                if (
                    not policy.models
                    or model in policy.models
                    or _same_model(reach, self._scope_deployments[index])
                ):
                    admitted.add(index)
                if model in policy.denied_models or _same_model(reach, self._denied_deployments[index]):
                    denied.add(index)
            if len(self._by_model) >= _MODELS_LIMIT:
                self._by_model.clear()
            found = self._by_model[model] = (frozenset(admitted), frozenset(denied))
        return found

    @property
    def is_empty(self) -> bool:
        return not self.policies

    def _index_rules(self) -> None:
        """Every distinct rule once, compiled, with the policies that use it, in policy order.

        Patterns and terms are compiled only when they passed the save-time check, and only while
        the policies compiled so far stay within the organization's bound (the measures each kept
        from its check): the services refuse a save past it, so a policy past it was written around
        them; it is not compiled and blocks what it applies to."""
        by_key: dict[tuple, tuple[Rule, list[int]]] = {}
        unchecked, over = set(), set()
        spent = RulesCost()
        for index, policy in enumerate(self.policies):
            if index >= ACTIVE_POLICIES_LIMIT:
                over.add(index)
                continue
            if policy.patterns or policy.terms:
                if not policy.rules_checked:
                    unchecked.add(index)
                    continue
                total = RulesCost(
                    spent.compile_micros + policy.compile_micros, spent.program_bytes + policy.program_bytes
                )
                if organization_refusal(active=index + 1, cost=total) is not None:
                    over.add(index)
                    continue
                spent = total
            keys: list[tuple[tuple, Rule]] = [
                (("detector", name), detector(name)) for name in policy.detectors
            ]
            keys += [(("pattern", p), Rule("pattern", f"(?:{p})")) for p in policy.patterns]
            if policy.terms:
                terms = tuple(sorted(set(policy.terms)))
                longest = max(len(term) for term in terms)
                guards = tuple(term.lower() for term in terms)
                rule = Rule("term", term_source(terms), max_length=longest, guards=guards)
                keys.append((("terms", terms), rule))
            for key, rule in keys:
                owners = by_key.setdefault(key, (rule, []))[1]
                if index not in owners:
                    owners.append(index)
        self._unchecked, self._over_limit = frozenset(unchecked), frozenset(over)
        if over:
            logger.warning(
                "Policies past the organization's bound are not compiled and block their requests: %s",
                ", ".join(self.policies[index].id for index in sorted(over)),
            )
        # Compiled here, when the configuration loads: the built-in detectors come compiled from
        # their module; the organization's patterns and terms are compiled now, and not kept in the
        # ``regex`` package's own cache (each engine holds its own until its generation is replaced).
        # The cycle collector off meanwhile: compiling 200 terms allocates some 80,000 objects, and the
        # collections they set off walk every object of the worker (170,000 in a bare Django
        # process): with it on, ten such lists took 510-600 ms of CPU here, with it off 250 ms, what
        # the save-time check measures in its small child process and the organization's bound
        # counts. Process-wide, so only for as long as the compiling takes; never turned on here if
        # something else had it off.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._rules = [(rule, _compile(rule), tuple(owners)) for rule, owners in by_key.values()]
        finally:
            if collecting:
                gc.enable()

    def _compiled(self, applicable: tuple[int, ...], *, response: bool = False) -> _Compiled:
        key = (applicable, response)
        compiled = self._sets.get(key)
        if compiled is None:
            chosen = set(applicable)
            rules, patterns, owners = [], [], []
            for rule, pattern, rule_owners in self._rules:
                mine = tuple(owner for owner in rule_owners if owner in chosen)
                if mine:
                    rules.append(rule)
                    patterns.append(pattern)
                    owners.append(mine)
            if len(self._sets) >= _COMPILED_SETS_LIMIT:
                self._sets.clear()
            scanner = Scanner(rules, patterns=patterns)  # compiled already: nothing compiles here
            compiled = self._sets[key] = _Compiled(scanner, tuple(owners))
        return compiled

    def _applicable(self, model: str, team_id, api_key_id) -> tuple[int, ...]:
        admitted = self._model_policies(model)[0]
        return tuple(
            index
            for index, policy in enumerate(self.policies)
            if index in admitted and policy.applies_to(team_id=team_id, api_key_id=api_key_id)
        )

    # --- Requests ----------------------------------------------------------------------------------

    def check_request(
        self, body: dict, *, endpoint: str, model: str, team_id: str | None, api_key_id: str
    ) -> RequestVerdict:
        applicable = self._applicable(model, team_id, api_key_id)
        if not applicable:
            return RequestVerdict(body=body)
        denied = self._model_policies(model)[1]
        compiled = self._compiled(applicable)
        # Refused before the body is walked: a large body of token ids would be walked for nothing.
        if compiled.scanner.rules and endpoint == EMBEDDINGS and _token_ids(body.get("input")):
            raise UnreadableInput(
                "This organization's policies read the text of a request, and token ids cannot "
                "be read: send 'input' as text."
            )
        deadline = time.perf_counter() + self.timeout
        slots = list(_text_slots(body, endpoint))
        total_chars = sum(len(text) for path, text in slots if not _fixed(path))
        scanned: list[list[Match]] = []
        if compiled.scanner.rules:
            try:
                scanned = [compiled.scan(text, deadline) for _, text in slots]
            except ScanTimeout as timeout:
                return self._timed_out(body, applicable, compiled, timeout.rule)
        # Matches per policy and category, and which matches a redact policy replaces.
        counts: dict[tuple[int, str], int] = {}
        for matches in scanned:
            for match in matches:
                category = compiled.scanner.rules[match.rule].key
                for owner in compiled.owners[match.rule]:
                    counts[owner, category] = counts.get((owner, category), 0) + 1
        decisions: list[Decision] = []
        blocked: Decision | None = None
        redacting: set[int] = set()
        for index in applicable:
            policy = self.policies[index]
            action = _ACTION_OF[policy.action]
            triggers: list[tuple[str, int, str]] = []
            if index in denied:
                triggers.append((DENIED_MODEL, 1, FLAGGED if action == REDACTED else action))
            if policy.max_prompt_chars is not None and total_chars > policy.max_prompt_chars:
                triggers.append((PROMPT_TOO_LONG, 1, FLAGGED if action == REDACTED else action))
            if index in self._unchecked or index in self._over_limit:
                action = BLOCKED
                category = UNCHECKED_PATTERN if index in self._unchecked else OVER_LIMIT
                triggers.insert(0, (category, 1, BLOCKED))
            for (owner, category), count in counts.items():
                if owner == index:
                    triggers.append((category, count, action))
            if not triggers:
                continue
            mine = [
                Decision(policy.id, policy.name, act, category, count) for category, count, act in triggers
            ]
            decisions += mine
            if action == BLOCKED:
                blocked = mine[0]
                break
            if action == REDACTED:
                redacting.add(index)
        if blocked is not None:
            return _verdict(body, decisions, blocked)
        new_body = body
        if redacting:
            replaced = {}
            for (path, text), matches in zip(slots, scanned, strict=True):
                chosen = [m for m in matches if redacting.intersection(compiled.owners[m.rule])]
                if chosen and _fixed(path):
                    # An object's key (a schema's property name) or a media payload's header:
                    # renaming it would change what the schema or the payload means, so what a
                    # redact policy finds there blocks the request.
                    owner = min(redacting.intersection(compiled.owners[chosen[0].rule]))
                    policy = self.policies[owner]
                    category = compiled.scanner.rules[chosen[0].rule].key
                    decision = Decision(policy.id, policy.name, BLOCKED, category, len(chosen))
                    kept = [d for d in decisions if d.policy_id != policy.id]
                    return _verdict(body, [*kept, decision], decision)
                if chosen:
                    rules = compiled.scanner.rules
                    replaced[path] = replace(text, chosen, lambda m, rules=rules: marker(rules[m.rule].key))
            if replaced:
                new_body = _with_values(body, replaced)
        return _verdict(new_body, decisions, None)

    def _timed_out(
        self, body: dict, applicable: tuple[int, ...], compiled: _Compiled, rule: int | None
    ) -> RequestVerdict:
        """Blocked: the first policy that owns the rule that ran out of time."""
        owners = compiled.owners[rule] if rule is not None else applicable
        culprit = self.policies[owners[0]]
        decision = Decision(culprit.id, culprit.name, BLOCKED, TIMEOUT, 1)
        return _verdict(body, [decision], decision)

    # --- Responses ---------------------------------------------------------------------------------

    def response_redactor(
        self, *, model: str, team_id: str | None, api_key_id: str
    ) -> "ResponseRedactor | None":
        applicable = tuple(
            index
            for index in self._applicable(model, team_id, api_key_id)
            if self.policies[index].action == "redact" and self.policies[index].apply_to_response
        )
        if not applicable:
            return None
        compiled = self._compiled(applicable, response=True)
        if not compiled.scanner.rules:
            return None
        return ResponseRedactor(self, compiled, applicable)


class ResponseRedactor:
    """Redacts an answer's text with the applicable redact policies that say ``apply_to_response``."""

    def __init__(self, engine: PolicyEngine, compiled: _Compiled, applicable: tuple[int, ...]) -> None:
        self._engine = engine
        self._compiled = compiled
        self._applicable = applicable
        bound = compiled.scanner.max_length()
        self.hold = STREAM_HOLD_LIMIT if bound is None else min(bound, STREAM_HOLD_LIMIT)

    def redact_text(self, text: str) -> tuple[str, tuple[Decision, ...]]:
        counts: dict[tuple[int, str], int] = {}
        redacted = self._redact(text, counts, pos=0, context="", final=True)[0]
        return redacted, self.decisions_of(counts)

    def stream(
        self, endpoint: str = CHAT
    ) -> "StreamRedaction | ResponsesStreamRedaction | MessagesStreamRedaction":
        """What redacts a stream of ``endpoint``'s events as they pass."""
        if endpoint == RESPONSES:
            return ResponsesStreamRedaction(self)
        if endpoint == MESSAGES:
            return MessagesStreamRedaction(self)
        return StreamRedaction(self)

    def decisions_of(self, counts: dict[tuple[int, str], int]) -> tuple[Decision, ...]:
        policies = self._engine.policies
        return tuple(
            Decision(policies[index].id, policies[index].name, REDACTED, category, count)
            for (index, category), count in sorted(counts.items())
        )

    def _redact(self, text: str, counts: dict, *, pos: int, context: str, final: bool) -> tuple[str, int]:
        """``text`` (after ``context``, which was released already) redacted as far as it is final:
        (the redacted released part, the length of ``text`` it covers)."""
        scanner, owners = self._compiled.scanner, self._compiled.owners
        whole = context + text
        try:
            matches = scanner.scan(
                whole, pos=len(context), deadline=time.perf_counter() + self._engine.timeout
            )
        except ScanTimeout as timeout:
            index = owners[timeout.rule][0] if timeout.rule is not None else self._applicable[0]
            counts[index, TIMEOUT] = counts.get((index, TIMEOUT), 0) + 1
            return marker(TIMEOUT), len(text)
        offset = len(context)
        end = len(whole)
        if not final:
            boundary = end - self.hold
            for match in matches:
                if match.end > boundary:
                    boundary = min(boundary, match.start)
            hard = end - STREAM_HOLD_LIMIT * 2  # a match that keeps growing is cut here
            if boundary < hard:
                boundary = hard
                for match in matches:
                    if match.start < boundary < match.end:
                        boundary = match.end
            end = max(boundary, offset)
        released = [m for m in matches if m.end <= end]
        for match in released:
            category = scanner.rules[match.rule].key
            for owner in owners[match.rule]:
                counts[owner, category] = counts.get((owner, category), 0) + 1
        # The context holds no match (the scan starts after it): it is the first ``offset`` characters.
        out = replace(whole[:end], released, lambda m: marker(scanner.rules[m.rule].key))
        return out[offset:], end - offset


class StreamRedaction:
    """Redacts ``choices[i].delta.content`` of OpenAI chat-completion chunks across chunk boundaries.

    Per choice the end of the text is held back (``ResponseRedactor.hold`` characters, and a match that
    may still grow): a frame gets the part of the text that can no longer change. A frame with a
    choice's ``finish_reason`` first gets that choice's held text; a frame without choices (the final
    usage frame, an error), ``[DONE]`` and ``finish()`` get every held text first, as frames of their
    own, so the order of the text never changes. Comments and other lines pass through."""

    def __init__(self, redactor: ResponseRedactor) -> None:
        self._redactor = redactor
        self._pending: dict[int, str] = {}
        self._context: dict[int, str] = {}
        self._counts: dict[tuple[int, str], int] = {}
        self._partial = b""
        self._template: dict | None = None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self._redactor.decisions_of(self._counts)

    def on_chunk(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        frames = data.split(b"\n\n")
        self._partial = frames.pop()  # what follows the last complete frame
        return b"".join(self._frame(frame) for frame in frames)

    def finish(self) -> bytes:
        tail, self._partial = self._partial, b""
        out = self._release_all()
        if tail.strip():
            out += self._frame(tail)
        return out

    def _frame(self, frame: bytes) -> bytes:
        original = frame + b"\n\n"
        if not frame.startswith(b"data:"):
            return original  # a comment, an event line
        payload = frame[5:].strip()
        if payload == b"[DONE]":
            return self._release_all() + original
        try:
            chunk = json.loads(payload)
        except ValueError:
            return self._release_all() + original
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list) or not choices:
            return self._release_all() + original  # the usage frame, an error event
        self._template = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        changed = False
        for choice in choices:
            if not isinstance(choice, dict) or not isinstance(choice.get("index", 0), int):
                continue
            index = choice.get("index", 0)
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            finished = choice.get("finish_reason") is not None
            if not isinstance(content, str) and not finished:
                continue
            pending = self._pending.get(index, "") + (content if isinstance(content, str) else "")
            released = self._release(index, pending, final=finished)
            if isinstance(content, str) or released:
                if not isinstance(delta, dict):
                    delta = choice["delta"] = {}
                if delta.get("content") != released:
                    delta["content"] = released
                    changed = True
        if not changed:
            return original
        return b"data: " + _compact(chunk) + b"\n\n"

    def _release(self, index: int, pending: str, *, final: bool) -> str:
        context = self._context.get(index, "")
        out, used = self._redactor._redact(pending, self._counts, pos=0, context=context, final=final)
        self._context[index] = (context + pending[:used])[-_STREAM_CONTEXT:]
        self._pending[index] = pending[used:]
        return out

    def _release_all(self) -> bytes:
        frames = []
        for index in sorted(self._pending):
            if self._pending[index]:
                text = self._release(index, self._pending[index], final=True)
                if text:
                    chunk = {
                        **(self._template or {"object": "chat.completion.chunk"}),
                        "choices": [{"index": index, "delta": {"content": text}, "finish_reason": None}],
                    }
                    frames.append(b"data: " + _compact(chunk) + b"\n\n")
        return b"".join(frames)


class ResponsesStreamRedaction:
    """Redacts the text of an OpenAI Responses stream (``event:`` and ``data:`` lines per event)
    across its events, as ``StreamRedaction`` does a chat stream's: each text part's end is held back
    from its ``response.output_text.delta`` events and released by the next ones; its
    ``response.output_text.done`` first gets what is still held, as a delta event of its own. The
    events that repeat a whole text (``output_text.done``, ``content_part.done``, ``output_item.done``
    and the Response that ends the stream) carry the redacted text. Events are numbered again, since
    a released tail adds one."""

    def __init__(self, redactor: ResponseRedactor) -> None:
        self._redactor = redactor
        self._counts: dict[tuple[int, str], int] = {}
        # Per text part (output index, content index): held text, released context, released text.
        self._pending: dict[tuple, str] = {}
        self._context: dict[tuple, str] = {}
        self._released: dict[tuple, str] = {}
        self._partial = b""
        self._sequence = 0

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self._redactor.decisions_of(self._counts)

    @property
    def sequence(self) -> int:
        """The events numbered so far: an event added after them goes on from here."""
        return self._sequence

    def on_chunk(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        frames = data.split(b"\n\n")
        self._partial = frames.pop()
        return b"".join(self._frame(frame) for frame in frames)

    def _frame(self, frame: bytes) -> bytes:
        data = next((line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:")), None)
        try:
            event = json.loads(data) if data else None
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return frame + b"\n\n"  # a comment, or what is no Responses event
        kind = event["type"]
        out = b""
        part = (event.get("output_index"), event.get("content_index"))
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            event["delta"] = self._release(part, self._pending.get(part, "") + event["delta"], final=False)
        elif kind == "response.output_text.done":
            tail = self._release(part, self._pending.get(part, ""), final=True)
            if tail:
                fields = {name: event.get(name) for name in ("item_id", "output_index", "content_index")}
                out += self._event(
                    {"type": "response.output_text.delta", **fields, "delta": tail, "logprobs": []}
                )
            event["text"] = self._text(part, event.get("text"))
        elif kind == "response.content_part.done" and isinstance(event.get("part"), dict):
            self._redact_part(event["part"], part)
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self._redact_item(event["item"], event.get("output_index"))
        elif isinstance(event.get("response"), dict):  # created, in_progress, completed, failed ...
            output = event["response"].get("output")
            for index, item in enumerate(output if isinstance(output, list) else ()):
                if isinstance(item, dict):
                    self._redact_item(item, index)
        return out + self._event(event)

    def _event(self, event: dict) -> bytes:
        if "sequence_number" in event or event["type"] == "response.output_text.delta":
            event["sequence_number"] = self._sequence
            self._sequence += 1
        return b"event: " + event["type"].encode() + b"\ndata: " + _compact(event) + b"\n\n"

    def _redact_item(self, item: dict, output_index) -> None:
        content = item.get("content")
        for content_index, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict):
                self._redact_part(part, (output_index, content_index))

    def _redact_part(self, part: dict, key: tuple) -> None:
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            part["text"] = self._text(key, part["text"])

    def _text(self, key: tuple, text) -> str:
        """The redacted whole text of a part: what was released of its deltas, or (a part that came
        whole, with no deltas) its text redacted now."""
        if key in self._released:
            return self._released[key]
        if not isinstance(text, str):
            return text
        redacted = self._redactor._redact(text, self._counts, pos=0, context="", final=True)[0]
        self._released[key] = redacted
        return redacted

    def _release(self, key: tuple, pending: str, *, final: bool) -> str:
        context = self._context.get(key, "")
        out, used = self._redactor._redact(pending, self._counts, pos=0, context=context, final=final)
        self._context[key] = (context + pending[:used])[-_STREAM_CONTEXT:]
        self._pending[key] = pending[used:]
        self._released[key] = self._released.get(key, "") + out
        return out


class MessagesStreamRedaction:
    """Redacts the text of an Anthropic Messages stream across its events, as ``StreamRedaction``
    does a chat stream's: each text block's end is held back from its ``text_delta`` events and
    released by the next ones; its ``content_block_stop`` first gets what is still held, as a
    ``content_block_delta`` of its own."""

    def __init__(self, redactor: ResponseRedactor) -> None:
        self._redactor = redactor
        self._counts: dict[tuple[int, str], int] = {}
        self._pending: dict[object, str] = {}
        self._context: dict[object, str] = {}
        self._partial = b""

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self._redactor.decisions_of(self._counts)

    def on_chunk(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        frames = data.split(b"\n\n")
        self._partial = frames.pop()
        return b"".join(self._frame(frame) for frame in frames)

    def _frame(self, frame: bytes) -> bytes:
        original = frame + b"\n\n"
        if b"content_block_" not in frame:
            return original  # message_start, message_delta, ping ...: no text of the answer
        data = next((line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:")), None)
        try:
            event = json.loads(data) if data else None
        except ValueError:
            return original
        if not isinstance(event, dict):
            return original
        index = event.get("index")
        delta = event.get("delta")
        if (
            event.get("type") == "content_block_delta"
            and isinstance(delta, dict)
            and delta.get("type") == "text_delta"
        ):
            pending = self._pending.get(index, "") + (
                delta.get("text") if isinstance(delta.get("text"), str) else ""
            )
            delta["text"] = self._release(index, pending, final=False)
            return _named_event(event)
        if event.get("type") == "content_block_stop" and self._pending.get(index):
            tail = self._release(index, self._pending[index], final=True)
            if tail:
                held = {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": tail},
                }
                return _named_event(held) + original
        return original

    def _release(self, key, pending: str, *, final: bool) -> str:
        context = self._context.get(key, "")
        out, used = self._redactor._redact(pending, self._counts, pos=0, context=context, final=final)
        self._context[key] = (context + pending[:used])[-_STREAM_CONTEXT:]
        self._pending[key] = pending[used:]
        return out


def _named_event(event: dict) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + _compact(event) + b"\n\n"


def _compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# --- Request bodies --------------------------------------------------------------------------------

Path = tuple


# An object's key in a slot's path: (..., _KEY, key) is the key itself, not its value.
_KEY = object()
# What else a string carries, read beside it and never rewritten (a match there blocks what a redact
# policy finds): (..., _HEADER) a media payload's data URL header ("data:image/png;base64,"), whose
# parameters could carry text; (..., _PAYLOAD) a base64 payload too short to be media
# (_MEDIA_MIN_CHARS), read as written; (..., _DECODED) the text a data URL or a base64 payload
# carries, decoded (percent-decoded, or base64 that decodes to text).
_HEADER = object()
_PAYLOAD = object()
_DECODED = object()
# The exact places a chat request carries media, and nowhere else whatever a key is called:
# ``messages[i].content[j]`` at the field's path, whose ``type`` is the value's first name; its second
# says whether a bare base64 payload (no data URL) is media there too.
_MEDIA = {
    ("image_url", "url"): ("image_url", False),
    ("input_audio", "data"): ("input_audio", True),
    ("file", "file_data"): ("file", True),
}
# The same for a Responses request: ``input[i].content[j]``, at the field's path, of the type.
_RESPONSES_MEDIA = {
    ("image_url",): ("input_image", False),
    ("file_data",): ("input_file", True),
    ("input_audio", "data"): ("input_audio", True),
}
# The same for an Anthropic Messages request: ``messages[i].content[j]``.
_MESSAGES_MEDIA = {("source", "data"): ("image", True)}
_MESSAGES_DOCUMENTS = {("source", "data"): ("document", True)}
# Where each endpoint's body carries its content parts: (the list's key, the media tables).
_MEDIA_PLACES = {
    CHAT: ("messages", (_MEDIA,)),
    RESPONSES: ("input", (_RESPONSES_MEDIA,)),
    MESSAGES: ("messages", (_MESSAGES_MEDIA, _MESSAGES_DOCUMENTS)),
}
# A base64 payload: its alphabet alone, padded, wrapped in lines (MIME wraps at 76): no space, no
# other character, and (line breaks aside) a multiple of four characters, as a decoder requires.
# The standard library's engine: 20 MB in 16 ms, the ``regex`` package's 250 ms.
_BASE64 = re.compile(r"[A-Za-z0-9+/\r\n]*={0,2}[\r\n]*")
# Shorter than this (192 bytes), a base64 payload is read as written as well: the smallest real
# images, recordings and documents are longer, and a word ("TITA", "4111111111111111") is valid
# base64 of a few bytes. A longer run of base64 holds a word only between its + and / characters.
_MEDIA_MIN_CHARS = 256
# How much of a payload is decoded to tell text from binary (a PNG, JPEG, WAV, MP3 or PDF shows its
# binary header in its first bytes): only text is decoded whole.
_SNIFF_CHARS = 1024
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")


class UnreadableInput(ValueError):
    """The request holds input its policies cannot read (embeddings as token ids) while a policy that
    reads text applies: refused (``param`` names the field) rather than let unread text through."""

    param = "input"


def _fixed(path: Path) -> bool:
    """The slot is an object's key or what a string carries: read, but never rewritten."""
    return path[-1] is _HEADER or path[-1] is _PAYLOAD or path[-1] is _DECODED or path[-2:-1] == (_KEY,)


def _token_ids(value) -> bool:
    """Embeddings input given as token ids: an int, a list of them, or a list of lists of them."""
    if isinstance(value, int):
        return True
    return isinstance(value, list) and any(
        isinstance(item, int) or (isinstance(item, list) and any(isinstance(x, int) for x in item))
        for item in value
    )


def _text_slots(body: dict, endpoint: str) -> Iterable[tuple[Path, str]]:
    """(path in the body, text) of every string that reaches the upstream: every value at any depth
    (messages' contents of every kind, names, tool calls' arguments, tool definitions with their
    parameters' descriptions and enums, ``response_format`` schemas, ``user``, ``metadata``, ``stop``,
    fields the gateway does not know ...) and every object key, in both endpoints, with what a data
    URL carries decoded (``_string_slots``). Not read: the top-level ``model`` (matched by
    deployment), and a base64 payload of media at the places a chat request carries media
    (``_media_place``) unless it is short or decodes to text."""
    if not isinstance(body, dict):
        return
    stack: list[tuple[Path, object]] = [((), body)]  # popped in document order
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if path[-2:-1] == (_KEY,):
                yield path, value
            else:
                media = _media_place(body, path, endpoint) if endpoint in _MEDIA_PLACES else None
                yield from _string_slots(path, value, media)
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if not path and key == "model":
                    continue
                stack.append(((*path, key), item))
                if isinstance(key, str):
                    stack.append(((*path, _KEY, key), key))
        elif isinstance(value, list):
            for i in range(len(value) - 1, -1, -1):
                stack.append(((*path, i), value[i]))


def _media_place(body: dict, path: Path, endpoint: str) -> bool | None:
    """Whether ``path`` is where a request carries media: a chat request's ``messages[i].content[j]``
    of type ``image_url`` at ``image_url.url``, ``input_audio`` at ``input_audio.data``, ``file`` at
    ``file.file_data``; a Responses request's ``input[i].content[j]`` of type ``input_image`` at
    ``image_url``, ``input_file`` at ``file_data``, ``input_audio`` at ``input_audio.data``; a
    Messages request's ``messages[i].content[j]`` of type ``image`` or ``document`` at
    ``source.data``. None when it is not, else whether a bare base64 payload is media there."""
    items, tables = _MEDIA_PLACES[endpoint]
    if len(path) < 5 or path[0] != items or path[2] != "content":
        return None
    if not isinstance(path[1], int) or not isinstance(path[3], int):
        return None
    part = body[items][path[1]]["content"][path[3]]
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if endpoint == MESSAGES:
        # A Messages block's source is media only as base64: a text document is text.
        source = part.get("source")
        if not isinstance(source, dict) or source.get("type") != "base64":
            return None
    for table in tables:
        place = table.get(path[4:])
        if place is not None and kind == place[0]:
            return place[1]
    return None


def _string_slots(path: Path, text: str, media: bool | None) -> Iterable[tuple[Path, str]]:
    """What is read of one string. At a place that carries media (``media`` not None), a valid base64
    payload (a data URL's, or bare where ``media`` says so) is not read as written (what an image, a
    recording or a PDF holds is not text) unless it is shorter than ``_MEDIA_MIN_CHARS``; its data URL
    header is read, and so is the text it decodes to, if it does. Anything else is read as written,
    and what a data URL carries is read decoded too, as a standard reader decodes it (``_carried``):
    what the upstream takes from it is the decoded payload."""
    url = _data_url(text)
    if media is not None:
        start = url.start if url is not None and url.base64 else 0 if media and url is None else None
        if start is not None and _is_base64(text, start):
            if start:
                yield (*path, _HEADER), text[:start]
            if len(text) - start < _MEDIA_MIN_CHARS:
                yield (*path, _PAYLOAD), text[start:]
            carried = _base64_text(text, start, charset=url.charset if url is not None else None)
            if carried:
                yield (*path, _DECODED), carried
            return
    yield path, text
    if url is not None:
        carried = _carried(text[url.start :], url)
    elif media:  # a bare payload that is not clean base64, as a lenient decoder would still take it
        carried = _carried(text, _DataUrl(start=0, base64=True, charset=None))
    else:
        carried = None
    if carried:
        yield (*path, _DECODED), carried


@dataclass(frozen=True, slots=True)
class _DataUrl:
    start: int  # where the payload starts (after the comma)
    base64: bool
    charset: str | None


def _data_url(text: str) -> _DataUrl | None:
    """The data URL ``text`` is (RFC 2397), None when it is none: leading white space and a header of
    any length are taken, as browsers and ``urllib`` take them."""
    start = _DATA_URL_START.match(text)
    if start is None:
        return None
    comma = text.find(",", start.end())
    if comma < 0:
        return None
    parameters = [part.strip().lower() for part in text[start.end() : comma].split(";")[1:]]
    charset = next((p.partition("=")[2].strip("\"' ") for p in parameters if p.startswith("charset=")), None)
    return _DataUrl(start=comma + 1, base64="base64" in parameters, charset=charset or None)


def _carried(payload: str, url: _DataUrl) -> str | None:
    """The text a data URL's payload carries, decoded as a lenient reader decodes it: percent-escapes
    undone, then for base64 every character outside its alphabets dropped (white space, ``%``-escaped
    padding), the URL-safe alphabet taken, missing padding added; the bytes read in the declared
    charset. None for base64 that decodes to binary, or to nothing."""
    if not url.base64:
        if "%" not in payload and url.charset is None:
            return None  # the payload is read as written already
        return _in_charset(unquote_to_bytes(payload), url.charset)
    # What a lenient decoder makes of the head first: a payload that is binary is not decoded whole.
    head = _lenient_base64(payload[: _SNIFF_CHARS * 2], cut=True)
    if head is None:
        return None
    head_text = _in_charset(head, url.charset)
    if _BINARY_TEXT.search(head_text[: len(head_text) - 1][:_SNIFF_CHARS]):  # the last may be cut
        return None
    decoded = _lenient_base64(payload, cut=False)
    return _in_charset(decoded, url.charset) if decoded else None


def _lenient_base64(payload: str, *, cut: bool) -> bytes | None:
    """``payload`` decoded as ``urllib`` and browsers decode a base64 data URL: percent-escapes undone,
    every character outside the alphabets dropped (white space, padding anywhere), the URL-safe
    alphabet taken, the padding made up. ``cut``: a head cut anywhere, decoded up to its last whole
    group."""
    raw = unquote_to_bytes(payload) if "%" in payload else payload.encode("ascii", "ignore")
    cleaned = _NOT_BASE64.sub(b"", raw).translate(_URL_SAFE)
    if cut:
        cleaned = cleaned[: len(cleaned) - len(cleaned) % 4]
    elif len(cleaned) % 4 == 1:
        cleaned = cleaned[:-1]  # one character alone carries no byte
    try:
        return base64.b64decode(cleaned + b"=" * (-len(cleaned) % 4)) or None
    except ValueError:
        return None


_DATA_URL_START = re.compile(r"\s*data:", re.IGNORECASE)
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/\-_]")
_URL_SAFE = bytes.maketrans(b"-_", b"+/")
_BINARY_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")


def _in_charset(data: bytes, charset: str | None) -> str:
    return data.decode(_codec(charset), errors="replace")


def _codec(charset: str | None) -> str:
    """The codec of a data URL's charset; UTF-8 when it names none, or one Python does not know."""
    try:
        return codecs.lookup(charset).name if charset else "utf-8"
    except LookupError:
        return "utf-8"


def _is_base64(text: str, start: int) -> bool:
    if not _BASE64.fullmatch(text, start):
        return False
    breaks = text.count("\r", start) + text.count("\n", start)
    return (len(text) - start - breaks) % 4 == 0


def _base64_text(text: str, start: int, *, charset: str | None = None) -> str | None:
    """The text a valid base64 payload decodes to, None when it is binary (a control character other
    than a line break or tab, or not text in its charset, in its first ``_SNIFF_CHARS`` characters)."""
    head = text[start : start + _SNIFF_CHARS + 64].replace("\r", "").replace("\n", "")
    head = head[: len(head) - len(head) % 4]
    try:
        sniffed = base64.b64decode(head)
    except ValueError:
        return None
    if not sniffed:
        return None
    codec = _codec(charset)
    if codec != "utf-8":
        # Another charset (UTF-16 puts NULs between ASCII letters): read in it, then judged as text.
        sniffed_text = sniffed.decode(codec, errors="replace")
        if _BINARY_TEXT.search(sniffed_text[: len(sniffed_text) - 1]):
            return None
    else:
        if _BINARY.search(sniffed):
            return None
        try:
            sniffed.decode()
        except UnicodeDecodeError as error:
            if error.start < len(sniffed) - 3:  # not a character cut at the end of the sniffed part
                return None
    whole = text[start:]
    if "\r" in whole or "\n" in whole:
        whole = whole.replace("\r", "").replace("\n", "")
    return _in_charset(base64.b64decode(whole), charset)


def _with_values(body: dict, values: dict[Path, str]) -> dict:
    """A copy of ``body`` with ``values`` set at their paths: only the containers on those paths are
    copied; the caller's body is never changed."""
    root = dict(body)
    copied = {id(root)}
    for path, value in values.items():
        container = root
        for key in path[:-1]:
            child = container[key]
            if id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                copied.add(id(child))
                container[key] = child
            container = child
        container[path[-1]] = value
    return root


def _compile(rule: Rule) -> regex.Pattern:
    if rule.key in ("pattern", "term"):
        return regex.compile(rule.source, cache_pattern=False)
    return compiled_rule(rule)


def _verdict(body: dict, decisions: list[Decision], blocked: Decision | None) -> RequestVerdict:
    if not decisions:
        return RequestVerdict(body=body)
    actions = {decision.action for decision in decisions}
    action = BLOCKED if blocked else REDACTED if REDACTED in actions else FLAGGED
    if blocked is not None:
        deciding = [d for d in decisions if d.policy_id == blocked.policy_id]
    else:
        deciding = [d for d in decisions if d.action == action]
    return RequestVerdict(
        body=body, decisions=tuple(decisions), blocked=blocked, action=action, reason=reason_of(deciding)
    )


def reason_of(decisions: Sequence[Decision]) -> str:
    """``<policy>: <category>[, <category>]`` per policy, joined with ``; ``: printable ASCII only (a
    header value), at most REASON_LIMIT characters, never the matched text."""
    per_policy: dict[str, list[str]] = {}
    for decision in decisions:
        per_policy.setdefault(decision.policy, []).append(decision.category)
    text = "; ".join(f"{name}: {', '.join(categories)}" for name, categories in per_policy.items())
    text = "".join(c if " " <= c <= "~" else "?" for c in text)
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."
