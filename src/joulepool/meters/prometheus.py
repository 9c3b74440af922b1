"""Energy counters scraped from Prometheus exporters: DCGM exporter and Kepler (standard §2.3).

- DCGM exporter: `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, the GPU's own counter in mJ, one
  series per GPU (labels `gpu`, `UUID`, `device`, `modelName`, `Hostname`, ...). A
  whole-device counter, so HwShunt.
- Kepler: `kepler_{pod,container}_{cpu,gpu}_joules_total`, joules. A pod's or container's
  figure is Kepler's split of a node or GPU counter by CPU time and utilisation, a model,
  so ModelBased at best (grade table in `joulepool.meters.grades`).

The exposition is parsed with prometheus-client's own text parser. That parser hands back
a float for any value not written as plain digits, and a float cannot carry every counter
exactly (a mJ counter above 2**53 has lost digits), so the parser is used to find and
validate the samples, and each sample's value is then read again from its own text with
`decimal.Decimal`, exactly. A value that is not a
finite, non-negative figure is refused (`invalid_value`), never rounded into one; the single
rounding made is Kepler's, documented at `joules_text_to_uj`.

A scrape's `read_at_us` is when its response arrived. Exporters refresh their counters on
their own interval (DCGM exporter's default is 30 s), so a reading may be that much older
than its timestamp; over a window that error is at most one refresh interval of energy at
each end, and it is the exporter's, not this module's.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation

from joulepool.errors import InvalidInput
from joulepool.meters.grades import MeterKind
from joulepool.meters.reading import Meter, MeterUnavailable, Reading, UnavailableReason, now_us

DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
KEPLER_ENERGY = frozenset(
    f"kepler_{level}_{part}_joules_total"
    for level in ("pod", "container")
    for part in ("cpu", "gpu")
)
DEFAULT_TIMEOUT_MS = 5000

# A float has a 53-bit significand: an integer of this size or more printed from one may
# not be the integer the exporter held.
_FLOAT_EXACT = 2**53
# Kepler prints µJ / 1e6 as a float64 in its shortest round-trip form. That text is within
# one float ulp of count / 1e6, so times 1e6 it is within count * 2**-52 of the count, which
# is under half a µJ, and rounds back to the exact count, while the count is at most 2**51.
_KEPLER_EXACT_UJ = 2**51
# Labels that change over a series' life and so must not be part of a meter's name.
_UNSTABLE_LABELS = frozenset({"state"})
_EXACT = Context(prec=80)


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample: name and labels as prometheus-client parsed them, the value's text (§2.3)."""

    name: str
    labels: Mapping[str, str]
    value_text: str


@dataclass(frozen=True, slots=True)
class Scrape:
    """What one endpoint said at one moment: the samples asked for, and when (§2.3)."""

    url: str
    read_at_us: int
    samples: tuple[Sample, ...] = field(default=())


def _sample_name(line: str) -> str:
    end = len(line)
    for i, ch in enumerate(line):
        if ch == "{" or ch.isspace():
            end = i
            break
    return line[:end]


def _value_text(line: str, start: int) -> str | None:
    """The value's text after the name (and label set) of a sample line, or None."""
    i = start
    if i < len(line) and line[i] == "{":
        quoted = escaped = False
        i += 1
        while i < len(line):
            ch = line[i]
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = quoted
            elif ch == '"':
                quoted = not quoted
            elif ch == "}" and not quoted:
                break
            i += 1
        else:
            return None
        i += 1
    parts = line[i:].split()
    return parts[0] if parts else None


def _same_value(text: str, parsed: float) -> bool:
    # prometheus-client gives an int for integer text and a float otherwise.
    if isinstance(parsed, int):
        try:
            return Decimal(text) == parsed
        except InvalidOperation:
            return False
    try:
        again = float(text)
    except ValueError:
        return False
    return again == parsed or (math.isnan(again) and math.isnan(parsed))


def parse_samples(text: str, names: Container[str], meter: str) -> tuple[Sample, ...]:
    """The samples named in `names`, from Prometheus text exposition (§2.3).

    The whole exposition must parse under prometheus-client's parser, as a Prometheus server
    would insist, or none of it is used; then each wanted line is parsed on its own (so
    the parser's counter-name munging cannot rename it) and its value text kept exactly.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        from joulepool.extras import require

        require("prometheus", "a DCGM exporter or Kepler meter")
        raise

    try:
        for _ in text_string_to_metric_families(text):
            pass
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise MeterUnavailable(
            meter, UnavailableReason.invalid_value, f"the exposition does not parse: {exc}"
        ) from None
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = _sample_name(line)
        if name not in names:
            continue
        families = list(text_string_to_metric_families(line + "\n"))
        samples = [s for family in families for s in family.samples]
        value_text = _value_text(line, len(name))
        if len(samples) != 1 or value_text is None:
            raise MeterUnavailable(
                meter, UnavailableReason.invalid_value, f"cannot read the line {line[:120]!r}"
            )
        sample = samples[0]
        # The parser and the text must agree on the value, or one of them misread the line.
        if not _same_value(value_text, sample.value):
            raise MeterUnavailable(
                meter, UnavailableReason.invalid_value, f"cannot read the value of {line[:120]!r}"
            )
        out.append(Sample(sample.name, dict(sample.labels), value_text))
    return tuple(out)


def fetch(
    url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS, meter: str | None = None
) -> tuple[str, int]:
    """GET an exposition; its text and the monotonic µs it arrived, or `unreachable` (§2.7)."""
    who = meter or url
    try:
        import httpx
    except ImportError:
        # The bridge's node zipapp (pool-node.pyz) carries the parser but no HTTP library:
        # the standard library's client fetches. Without the parser either, the extra is
        # missing, and `require` says so.
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            from joulepool.extras import require

            require("prometheus", "a DCGM exporter or Kepler meter")
            raise
        return _fetch_stdlib(url, timeout_ms, who)
    try:
        # Exporters are node-local: a proxy from the environment would be the wrong path.
        response = httpx.get(url, timeout=timeout_ms / 1000, trust_env=False, follow_redirects=True)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise MeterUnavailable(
            who, UnavailableReason.unreachable, f"{url}: {type(exc).__name__}: {exc}"
        ) from None
    at = now_us()
    if response.status_code != 200:
        raise MeterUnavailable(
            who, UnavailableReason.unreachable, f"{url} answered HTTP {response.status_code}"
        )
    try:
        return response.content.decode("utf-8"), at
    except UnicodeDecodeError:
        raise MeterUnavailable(
            who, UnavailableReason.invalid_value, f"{url} is not UTF-8 text"
        ) from None


def _fetch_stdlib(url: str, timeout_ms: int, who: str) -> tuple[str, int]:
    """`fetch` by urllib: the same GET, no proxy from the environment, redirects followed."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise MeterUnavailable(who, UnavailableReason.unreachable, f"{url}: not http(s)://")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_ms / 1000) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raise MeterUnavailable(
            who, UnavailableReason.unreachable, f"{url} answered HTTP {exc.code}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MeterUnavailable(
            who, UnavailableReason.unreachable, f"{url}: {type(exc).__name__}: {exc}"
        ) from None
    at = now_us()
    if status != 200:
        raise MeterUnavailable(who, UnavailableReason.unreachable, f"{url} answered HTTP {status}")
    try:
        return body.decode("utf-8"), at
    except UnicodeDecodeError:
        raise MeterUnavailable(
            who, UnavailableReason.invalid_value, f"{url} is not UTF-8 text"
        ) from None


def scrape(
    url: str, names: Iterable[str], timeout_ms: int = DEFAULT_TIMEOUT_MS, meter: str | None = None
) -> Scrape:
    """Fetch an endpoint once and keep the samples named in `names` (§2.3)."""
    text, at = fetch(url, timeout_ms, meter)
    return Scrape(url, at, parse_samples(text, frozenset(names), meter or url))


def _decimal(text: str, meter: str, what: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise MeterUnavailable(
            meter, UnavailableReason.invalid_value, f"{what} {text!r} is not a number"
        ) from None
    if not value.is_finite():
        raise MeterUnavailable(
            meter, UnavailableReason.invalid_value, f"{what} is {text}, not a figure"
        )
    if value < 0:
        raise MeterUnavailable(meter, UnavailableReason.invalid_value, f"{what} {text} is negative")
    return value


def _plain_integer(text: str) -> bool:
    digits = text[1:] if text.startswith("+") else text
    return digits.isascii() and digits.isdigit()


def millijoules_text_to_uj(text: str, meter: str) -> int:
    """A counter's text in whole mJ as exact µJ; a fraction or a lossy float is refused (§2.3)."""
    value = _decimal(text, meter, "the counter")
    if value != value.to_integral_value():
        raise MeterUnavailable(
            meter,
            UnavailableReason.invalid_value,
            f"the mJ counter {text} is not a whole number of millijoules",
        )
    if not _plain_integer(text) and value >= _FLOAT_EXACT:
        raise MeterUnavailable(
            meter,
            UnavailableReason.invalid_value,
            f"the mJ counter {text} was printed from a float above 2**53 and may have lost digits",
        )
    return int(value) * 1000


def joules_text_to_uj(text: str, meter: str) -> int:
    """A Kepler counter's text in J as µJ (§2.3).

    Kepler keeps whole µJ and prints them divided by 10**6 as a float64, so the text is
    rarely a whole number of µJ; the nearest µJ is Kepler's own count, exactly, while it is
    at most 2**51 µJ (about 2.25 GJ per series). Above that a printed float cannot be
    trusted to name a single µJ and the value is refused as `invalid_value`, not guessed.
    """
    value = _decimal(text, meter, "the counter")
    micro = _EXACT.multiply(value, Decimal(1_000_000))
    whole = micro.to_integral_value()
    if not _plain_integer(text) and whole > _KEPLER_EXACT_UJ:
        raise MeterUnavailable(
            meter,
            UnavailableReason.invalid_value,
            f"the joule counter {text} was printed from a float too large to name one µJ",
        )
    return int(whole)


class DcgmMeter(Meter):
    """One GPU's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` from a DCGM exporter, HwShunt (§2.3).

    `gpu` is the GPU's UUID (label `UUID`) or its index (label `gpu`). dcgm-exporter repeats
    a GPU's series once per pod or MIG instance it maps to the GPU; copies carrying one
    value are one counter, copies that disagree are refused as ambiguous.
    """

    kind = MeterKind.dcgm

    def __init__(self, url: str, gpu: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if not isinstance(gpu, str) or not gpu:
            raise InvalidInput("gpu", "a DCGM meter needs a GPU UUID or index")
        super().__init__(f"dcgm:{gpu}")
        self.url = url
        self.gpu = gpu
        self.timeout_ms = timeout_ms

    def matches(self, sample: Sample) -> bool:
        """Whether a sample is this GPU's energy counter (§2.3)."""
        if sample.name != DCGM_ENERGY:
            return False
        label = "gpu" if self.gpu.isdigit() else "UUID"
        return sample.labels.get(label) == self.gpu

    def reading_from(self, scraped: Scrape) -> Reading:
        """This GPU's reading out of a scrape already taken (§2.3)."""
        values = {s.value_text for s in scraped.samples if self.matches(s)}
        if not values:
            raise self.unavailable(
                UnavailableReason.not_found,
                f"{scraped.url} has no {DCGM_ENERGY} for GPU {self.gpu}",
            )
        counters = {millijoules_text_to_uj(v, self.name) for v in values}
        if len(counters) != 1:
            raise self.unavailable(
                UnavailableReason.invalid_value,
                f"{scraped.url} has {len(counters)} different {DCGM_ENERGY} values "
                f"for GPU {self.gpu}",
            )
        return Reading(
            self.name, counters.pop(), scraped.read_at_us, self.grade, resolution_uj=1000
        )

    def read(self) -> Reading:
        """Scrape the exporter and read this GPU's counter, or raise `MeterUnavailable` (§2.7)."""
        return self.reading_from(scrape(self.url, (DCGM_ENERGY,), self.timeout_ms, self.name))


def kepler_name(metric: str, selector: Mapping[str, str]) -> str:
    """A Kepler series' meter name, `kepler:METRIC{label=value,...}`, labels sorted (§2.3)."""
    inner = ",".join(f"{k}={selector[k]}" for k in sorted(selector))
    return f"kepler:{metric}{{{inner}}}"


class KeplerMeter(Meter):
    """One Kepler pod or container series, ModelBased: Kepler models the split (§2.3).

    `selector` names the series by its labels (for example `pod_namespace`, `pod_name`,
    `zone`); it must match exactly one series. Kepler exports one series per zone or per
    GPU, and a package zone already contains its core zone, so the meter refuses to add
    series together: a selector that matches two is ambiguous.
    """

    kind = MeterKind.kepler

    def __init__(
        self,
        url: str,
        metric: str,
        selector: Mapping[str, str],
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        if metric not in KEPLER_ENERGY:
            raise InvalidInput(
                "metric", f"{metric!r} is not one of {', '.join(sorted(KEPLER_ENERGY))}"
            )
        if not selector:
            raise InvalidInput(
                "selector", "a Kepler meter needs labels naming one pod or container"
            )
        super().__init__(kepler_name(metric, selector))
        self.url = url
        self.metric = metric
        self.selector = dict(selector)
        self.timeout_ms = timeout_ms

    def matches(self, sample: Sample) -> bool:
        """Whether a sample is a series this meter's selector names (§2.3)."""
        return sample.name == self.metric and all(
            sample.labels.get(k) == v for k, v in self.selector.items()
        )

    def reading_from(self, scraped: Scrape) -> Reading:
        """This series' reading out of a scrape already taken (§2.3)."""
        found = [s for s in scraped.samples if self.matches(s)]
        if not found:
            raise self.unavailable(UnavailableReason.not_found, f"{scraped.url} has no such series")
        if len(found) > 1:
            raise self.unavailable(
                UnavailableReason.invalid_value,
                f"{scraped.url} has {len(found)} series matching; "
                "add labels (zone, gpu) to name one",
            )
        counter = joules_text_to_uj(found[0].value_text, self.name)
        return Reading(self.name, counter, scraped.read_at_us, self.grade, resolution_uj=1)

    def read(self) -> Reading:
        """Scrape Kepler and read this series, or raise `MeterUnavailable` (§2.3, §2.7)."""
        return self.reading_from(scrape(self.url, (self.metric,), self.timeout_ms, self.name))


def meters_in(
    scraped: Scrape, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> list[DcgmMeter | KeplerMeter]:
    """A meter for every DCGM GPU and every Kepler pod or container series in a scrape (§2.3)."""
    found: dict[str, DcgmMeter | KeplerMeter] = {}
    for s in scraped.samples:
        meter: DcgmMeter | KeplerMeter
        if s.name == DCGM_ENERGY:
            gpu = s.labels.get("UUID") or s.labels.get("gpu")
            if not gpu:
                continue
            meter = DcgmMeter(scraped.url, gpu, timeout_ms)
        elif s.name in KEPLER_ENERGY:
            selector = {k: v for k, v in s.labels.items() if k not in _UNSTABLE_LABELS}
            if not selector:
                continue
            meter = KeplerMeter(scraped.url, s.name, selector, timeout_ms)
        else:
            continue
        found.setdefault(meter.name, meter)
    return list(found.values())


def discover_prometheus(
    url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> tuple[Scrape, list[DcgmMeter | KeplerMeter]]:
    """Scrape an endpoint once; the scrape and the DCGM and Kepler meters it offers (§2.3)."""
    scraped = scrape(url, {DCGM_ENERGY, *KEPLER_ENERGY}, timeout_ms)
    return scraped, meters_in(scraped, timeout_ms)
