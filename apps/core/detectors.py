"""What the gateway recognises in text: personal data and credentials, by name, and the scanner that
looks for many of them (and an organization's own patterns) in one pass.

One module serves the audit log's redaction (``apps/audit/redaction.py``) and the policies
(``apps/policies/engine.py``), so a body is masked the same way wherever it is kept or sent.

A detector is a regular expression source for the ``regex`` package plus, where a shape alone says
too little, a validator on the matched text (a card number passes Luhn, an IBAN its mod-97
checksum). ``Scanner`` looks for any number of rules in a text, each compiled once, and merges
their matches leftmost first: where two rules match at the same place, the earlier rule takes it.
Every detector starts with a character that is rare in prose and checks what comes before it only
there, so a scan stays linear, and the ones with a literal every match holds (``@``, ``sk-``,
``whsec_`` ...) are not searched for in a text without it; detector matches are bounded
(``max_length``) except credentials, which are masked whole however long they are.
"""

import ipaddress
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import regex
from django.conf import settings


class ScanTimeout(TimeoutError):
    """The scan did not finish before its deadline: the caller fails closed. ``rule`` is the index of
    the rule being searched for then (None when unknown)."""

    def __init__(self, message: str = "", *, rule: int | None = None) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Rule:
    """One alternative of a scan: ``key`` says what matched (a detector's name, ``pattern``, ``term``
    ...), ``source`` is a ``regex`` pattern with no global inline flags, ``validate`` (optional)
    accepts or refuses a match's text, ``max_length`` is the longest match it can make (used to hold
    back the end of a stream that a match may still grow into; None when unbounded)."""

    key: str
    source: str
    validate: Callable[[str], bool] | None = None
    max_length: int | None = None
    # What a match takes in before the place the alternation matched it (a regex, at most
    # ``prefix_max`` characters, matched so that it ends there): "ada" of "ada@example.com".
    prefix: str | None = None
    prefix_max: int = 0
    # Substrings of which every match contains at least one, in lower case: a text holding none
    # (looked up in its lower-cased copy, at C speed) is not scanned for the rule at all.
    guards: tuple[str, ...] = ()
    # The characters a match's search position (where the pattern starts matching, before any
    # ``prefix``) can be: in an ASCII text the search starts at the first of them (found at C speed),
    # and a text without any is not searched for the rule.
    anchors: str = ""


# --- Validators ------------------------------------------------------------------------------------


def _digits(text: str) -> str:
    return "".join(character for character in text if character.isdigit())


def luhn_valid(text: str) -> bool:
    digits = _digits(text)
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for position, character in enumerate(reversed(digits)):
        value = ord(character) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


# Lengths of the IBAN registry (SWIFT); a country that is not listed is not an IBAN.
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def iban_valid(text: str) -> bool:
    compact = text.replace(" ", "").upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum() or not compact.isascii():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(character, 36)) for character in rearranged)) % 97 == 1


def us_ssn_valid(text: str) -> bool:
    digits = _digits(text)
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def phone_valid(text: str) -> bool:
    return 7 <= len(_digits(text)) <= 15  # E.164 allows at most 15 digits


def ip_address_valid(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# --- Detectors -------------------------------------------------------------------------------------

_SEP = r"[ .\-]"
# Every alternative starts with a character that is rare in prose (a digit, "@", "+", ":", a
# credential's literal prefix) and checks the character before it only then: an alternative that
# starts with a lookbehind or a letter is tried at every position of the text, and the whole scan
# was ten times slower (16,000 characters: 11 ms against about 1). Where a match begins before that
# character (an e-mail's local part, an IBAN's country, an IPv6 address's first group), the rule's
# ``prefix`` says what is taken in before it.
_PHONE = (
    r"[+(0-9](?<![\w+][+(0-9])(?:"
    # international: +44 20 7946 0958, +1-555-123-4567, +4915112345678
    r"(?<=\+)\d{1,3}" + _SEP + r"?(?:\(\d{1,4}\)" + _SEP + r"?)?\d{1,4}(?:" + _SEP + r"?\d{2,4}){1,4}"
    # North American: (555) 123-4567, 555-123-4567, 555.123.4567
    r"|(?<=\()\d{3}\)" + _SEP + r"?\d{3}" + _SEP + r"\d{4}"
    r"|(?<=\d)\d{2}[.\-]\d{3}[.\-]\d{4}"
    # national with a trunk 0: 020 7946 0958, 030-1234567
    r"|(?<=0)\d{1,4}" + _SEP + r"\d{2,8}(?:" + _SEP + r"\d{2,4}){0,3}"
    r")(?!\w)"
)
_IPV4 = r"(?:\d{1,3}\.){3}\d{1,3}"
_TOKEN_CHARACTER = r"[A-Za-z0-9_\-]"


def _token_start(lead: str, rest: str) -> str:
    """``lead`` (fixed width) then ``rest``, where no token character comes before ``lead``: the
    literal lead first, so the engine skips to it, and the boundary checked only there."""
    return f"{lead}(?<!{_TOKEN_CHARACTER}{lead}){rest}"


_SECRET = "|".join(
    (
        # OpenAI (sk-proj-..., sk-svcacct-...), Anthropic (sk-ant-api03-...), the gateway's sk_live_...
        _token_start("sk[-_]", r"[A-Za-z0-9_\-]{16,}"),
        _token_start("[pr]k_", r"(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe publishable, restricted
        _token_start("AKIA", r"[0-9A-Z]{16}(?![A-Za-z0-9])"),  # AWS access key ids
        _token_start("[Bb][Ee][Aa][Rr][Ee][Rr]", r"\s+[A-Za-z0-9._\-~+/]{16,}=*"),
        _token_start("whsec_", r"[A-Za-z0-9+/=_\-]{16,}"),
    )
)

_DIGITS = "0123456789"
_SECRET_GUARDS = ("sk-", "sk_", "pk_", "rk_", "akia", "bearer", "whsec_")

DETECTORS: dict[str, Rule] = {
    "email": Rule(
        "email",
        r"@(?<=(?<![\w.%+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@)"
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![\w\-])",
        max_length=254,
        prefix=r"(?<![\w.%+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}",
        prefix_max=64,
        guards=("@",),
    ),
    "phone": Rule("phone", _PHONE, phone_valid, max_length=32, anchors="+(" + _DIGITS),
    "payment_card": Rule(
        "payment_card", r"\d(?<![\w\-]\d)(?:[ \-]?\d){12,18}(?!\w)", luhn_valid, 37, anchors=_DIGITS
    ),
    "iban": Rule(
        "iban",
        r"\d(?<=(?<!\w)[A-Za-z]{2}\d)\d(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?(?!\w)",
        iban_valid,
        max_length=42,
        prefix=r"[A-Za-z]{2}",
        prefix_max=2,
        anchors=_DIGITS,
    ),
    "us_ssn": Rule(
        "us_ssn",
        r"\d(?<![\w\-]\d)\d\d(?:-\d{2}-|[ ]\d{2}[ ])\d{4}(?![\w\-])",
        us_ssn_valid,
        11,
        anchors=_DIGITS,
    ),
    "ip_address": Rule(
        "ip_address",
        # IPv4 (a sentence may end after it: "10.0.0.1."); IPv6 (full, compressed, IPv4-mapped) from
        # its first colon, its first group taken in before it.
        r"\d(?<![\w.:]\d)(?:\d{0,2}\.)(?:\d{1,3}\.){2}\d{1,3}(?!\w|\.\d)"
        r"|:(?<=(?<![\w.:])[0-9A-Fa-f]{0,4}:)(?:[0-9A-Fa-f]{0,4}:){1,6}(?:" + _IPV4 + r"|[0-9A-Fa-f]{1,4})?"
        r"(?![\w:])",
        ip_address_valid,
        max_length=45,
        prefix=r"(?<![\w.:])[0-9A-Fa-f]{0,4}",
        prefix_max=4,
        anchors=":" + _DIGITS,
    ),
    "secret": Rule("secret", _SECRET, guards=_SECRET_GUARDS),
}
DETECTOR_NAMES: tuple[str, ...] = tuple(DETECTORS)
# Each detector for people (the console's forms and pages); the API, the markers and the headers keep
# the names. tests/console/test_policies.py checks that every detector has one.
DETECTOR_LABELS: dict[str, str] = {
    "email": "Email address",
    "phone": "Phone number",
    "payment_card": "Payment card number",
    "iban": "Bank account number (IBAN)",
    "us_ssn": "US Social Security number",
    "ip_address": "IP address",
    "secret": "Secret or API key",
}
PERSONAL_DETECTORS: tuple[str, ...] = ("email", "phone", "payment_card", "iban", "us_ssn", "ip_address")


def detector(name: str) -> Rule:
    """The detector called ``name`` (KeyError for an unknown one). ``secret`` also matches gateway
    keys of the configured prefix (GATEWAY_API_KEY_PREFIX), which need not look like any other."""
    if name == "secret":
        return _secret_rule(settings.GATEWAY_API_KEY_PREFIX)
    return DETECTORS[name]


@lru_cache(maxsize=4)
def _secret_rule(prefix: str) -> Rule:
    if not prefix or prefix.startswith(("sk_", "sk-")):
        return DETECTORS["secret"]
    own = _token_start(regex.escape(prefix), r"[A-Za-z0-9_\-]{16,}")
    return Rule("secret", f"{own}|{_SECRET}", guards=(*_SECRET_GUARDS, prefix.lower()))


# --- Compiling ------------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def compiled_rule(rule: Rule) -> regex.Pattern:
    """A built-in rule's pattern, compiled once per process (the detectors are compiled at import,
    below: no request ever compiles one). An organization's own patterns do not come through here:
    the policy engine compiles them when the organization's configuration loads."""
    return regex.compile(rule.source)


@lru_cache(maxsize=32)
def _prefix_pattern(prefix: str) -> regex.Pattern:
    return regex.compile(f"(?:{prefix})\\Z")


for _rule in DETECTORS.values():
    compiled_rule(_rule)
    if _rule.prefix:
        _prefix_pattern(_rule.prefix)


# --- The scanner -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    start: int
    end: int
    rule: int  # index into the scanner's rules


@dataclass(eq=False)
class Scanner:
    """Rules scanned for in a text, their matches merged leftmost first: where two rules match at
    the same place, the earlier rule takes it, and a match inside another's is dropped.

    Each rule is searched for on its own, compiled once: a rule alone keeps the ``regex`` package's
    fast paths (a literal it can skip to, a first character), which one alternation of them all
    loses at every position of the text (ten policies on 16,000 characters: 6.5 ms as one
    alternation, under 0.5 ms rule by rule). A rule with ``guards`` is not searched for at all in a
    text that holds none of them. A match a rule's validator refuses is passed over, and that rule's
    search goes on one character further."""

    rules: Sequence[Rule]
    # The rules' compiled patterns, in the same order, when the caller compiled them already (the
    # policy engine does, off the event loop, when an organization's configuration loads); None:
    # compiled here (the detectors' come from a cache filled at import).
    patterns: Sequence[regex.Pattern] | None = None
    _patterns: tuple[regex.Pattern, ...] = field(init=False, repr=False)
    _prefixes: dict[str, regex.Pattern] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.rules = tuple(self.rules)
        if self.patterns is None:
            self._patterns = tuple(compiled_rule(rule) for rule in self.rules)
        else:
            self._patterns = tuple(self.patterns)
            if len(self._patterns) != len(self.rules):
                raise ValueError("one compiled pattern per rule")
        self._prefixes = {rule.prefix: _prefix_pattern(rule.prefix) for rule in self.rules if rule.prefix}

    def max_length(self) -> int | None:
        """The longest match any rule can make, or None when one is unbounded."""
        lengths = [rule.max_length for rule in self.rules]
        return None if None in lengths else max(lengths, default=0)

    def scan(self, text: str, *, pos: int = 0, deadline: float | None = None) -> list[Match]:
        """Every match from ``pos`` on (lookbehinds see the text before ``pos``), leftmost first,
        not overlapping. Raises ``ScanTimeout`` once ``deadline`` (``time.perf_counter()``) passes,
        naming the rule that was being searched for."""
        found: list[Match] = []
        lowered: str | None = None
        ascii_only: bool | None = None
        firsts: dict[str, int] = {}
        for index, rule in enumerate(self.rules):
            if rule.guards:
                if lowered is None:
                    lowered = text.lower()
                if not any(guard in lowered for guard in rule.guards):
                    continue
            start = pos
            if rule.anchors:
                if ascii_only is None:
                    ascii_only = text.isascii()  # \d would match other scripts' digits too
                if ascii_only:
                    first = firsts.get(rule.anchors)
                    if first is None:
                        first = firsts[rule.anchors] = _first_of(text, rule.anchors, pos)
                    if first < 0:
                        continue
                    start = first
            try:
                found += self._matches(text, index, start, pos, deadline)
            except TimeoutError as error:  # the regex package's, or our own between two searches
                raise ScanTimeout(str(error), rule=index) from None
        if len(found) < 2:
            return found
        found.sort(key=lambda match: (match.start, match.rule))
        merged, end = [], pos
        for match in found:
            if match.start >= end:
                merged.append(match)
                end = match.end
        return merged

    def _matches(self, text: str, index: int, pos: int, floor: int, deadline: float | None) -> list[Match]:
        """The rule's matches, searched for from ``pos``; none begins before ``floor``."""
        rule, search = self.rules[index], self._patterns[index].search
        matches, end = [], len(text)
        while pos <= end:
            found = search(text, pos, timeout=_remaining(deadline))
            if found is None:
                break
            start, stop = found.span()
            if stop == start:  # a pattern that can match nothing matches nothing
                pos = start + 1
                continue
            begin = self._begin(text, rule, start, floor) if rule.prefix else start
            if rule.validate is None or rule.validate(text[begin:stop]):
                matches.append(Match(begin, stop, index))
                pos = floor = stop
            else:
                pos = start + 1
        return matches

    def _begin(self, text: str, rule: Rule, at: int, floor: int) -> int:
        """Where a match of ``rule`` found at ``at`` begins: its prefix taken in, never before
        ``floor`` (the end of the rule's previous match)."""
        found = self._prefixes[rule.prefix].search(text, max(floor, at - rule.prefix_max), at)
        return found.start() if found is not None else at

    def sub(
        self,
        text: str,
        replacement: Callable[[Rule], str],
        *,
        deadline: float | None = None,
    ) -> tuple[str, list[Match]]:
        """``text`` with each match replaced by ``replacement(rule)``, and the matches."""
        matches = self.scan(text, deadline=deadline)
        if not matches:
            return text, matches
        return replace(text, matches, lambda match: replacement(self.rules[match.rule])), matches


def replace(text: str, matches: Sequence[Match], replacement: Callable[[Match], str]) -> str:
    pieces, last = [], 0
    for match in matches:
        pieces += [text[last : match.start], replacement(match)]
        last = match.end
    pieces.append(text[last:])
    return "".join(pieces)


def _first_of(text: str, characters: str, pos: int) -> int:
    """The first position from ``pos`` holding one of ``characters``, -1 when there is none."""
    found = [at for at in (text.find(character, pos) for character in characters) if at >= 0]
    return min(found, default=-1)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.perf_counter()
    if left <= 0:
        raise ScanTimeout("the scan ran out of time")
    return left


def scan_deadline(seconds: float) -> float:
    return time.perf_counter() + seconds
