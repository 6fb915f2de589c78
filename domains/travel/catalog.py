"""Reference catalogs: a TravelPlanner row's ``reference_information`` parsed once into typed
tables (restaurants, attractions, accommodations, flights, taxis, self-driving routes) and the
dated route scaffold.

The raw tables are ``pandas.DataFrame.to_string`` text: right-aligned columns under known
headers, restaurants with a leading integer index. A column's cell is the text between the
end of the previous header and the end of its own header. Only the columns the evaluator
needs are kept (cost, room, cuisine, minimum-night and transportation metadata); addresses,
coordinates, phone numbers and URLs are dropped.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

HEADERS = {
    "Attractions": ["Name", "Latitude", "Longitude", "Address", "Phone", "Website", "City"],
    "Restaurants": ["Name", "Average Cost", "Cuisines", "Aggregate Rating", "City"],
    "Accommodations": ["NAME", "price", "room type", "house_rules", "minimum nights", "maximum occupancy",
                       "review rate number", "city"],
    "Flight": ["Flight Number", "Price", "DepTime", "ArrTime", "ActualElapsedTime", "FlightDate", "OriginCityName",
               "DestCityName", "Distance"],
}
GROUND = re.compile(r"^(self-driving|taxi), from (.+?) to (.+?), duration: (.+?), distance: ([\d,.]+) km, cost: (\d+)",
                    re.I)
DATED = re.compile(r"^Flight from (.+?) to (.+?) on (\d{4}-\d{2}-\d{2})$")
UNDATED = re.compile(r"^(Self-driving|Taxi) from (.+?) to (.+)$")


class CatalogError(ValueError):
    """A reference slice that cannot be parsed; the message names the table."""


US_STATES = ("Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware",
             "District of Columbia", "Florida", "Georgia", "Hawaii", "Idaho", "Illinois", "Indiana", "Iowa", "Kansas",
             "Kentucky", "Louisiana", "Maine", "Maryland", "Massachusetts", "Michigan", "Minnesota", "Mississippi",
             "Missouri", "Montana", "Nebraska", "Nevada", "New Hampshire", "New Jersey", "New Mexico", "New York",
             "North Carolina", "North Dakota", "Ohio", "Oklahoma", "Oregon", "Pennsylvania", "Rhode Island",
             "South Carolina", "South Dakota", "Tennessee", "Texas", "Utah", "Vermont", "Virginia", "Washington",
             "West Virginia", "Wisconsin", "Wyoming", "Puerto Rico", "Virgin Islands", "Guam")
_STATE_SUFFIX = re.compile(r"\s*\((%s)\)\s*$" % "|".join(US_STATES), re.I)
_STATE_SUFFIX_EXACT = re.compile(r"\((%s)\)$" % "|".join(US_STATES))


def norm_city(name: str) -> str:
    """Case-folded city without a ``(State)`` suffix: ``Pittsburgh(Pennsylvania)`` -> ``pittsburgh``.

    Only a US state's name is dropped: any other parenthesised suffix (``Pensacola(5)``) stays part of
    the name, so it names no city of the catalogue."""
    return _STATE_SUFFIX.sub("", str(name)).strip().casefold()


def norm_name(name: str) -> str:
    return re.sub(r"\s+", " ", str(name)).strip().casefold()


@dataclass(frozen=True)
class Restaurant:
    name: str
    city: str
    cost: float  # average cost per person
    cuisines: tuple[str, ...]

    @property
    def value(self) -> str:
        return f"{self.name}, {self.city}"


@dataclass(frozen=True)
class Attraction:
    name: str
    city: str

    @property
    def value(self) -> str:
        return f"{self.name}, {self.city}"


@dataclass(frozen=True)
class Accommodation:
    name: str
    city: str
    price: float  # per night, per room
    room_type: str
    house_rules: str
    min_nights: int
    max_occupancy: int

    @property
    def value(self) -> str:
        return f"{self.name}, {self.city}"

    def rooms(self, people: int) -> int:
        return max(1, math.ceil(people / max(1, self.max_occupancy)))


@dataclass(frozen=True)
class Flight:
    number: str
    price: float  # per person
    dep: str
    arr: str
    date: str
    origin: str
    dest: str

    @property
    def value(self) -> str:
        return (f"Flight Number: {self.number}, from {self.origin} to {self.dest}, Departure Time: {self.dep}, "
                f"Arrival Time: {self.arr}")


@dataclass(frozen=True)
class Ground:
    mode: str  # "self-driving" or "taxi"
    origin: str
    dest: str
    duration: str
    distance: str
    cost: float  # per vehicle

    @property
    def value(self) -> str:
        label = "Self-driving" if self.mode == "self-driving" else "Taxi"
        return (f"{label}, from {self.origin} to {self.dest}, duration: {self.duration}, distance: {self.distance} km, "
                f"cost: {int(self.cost)}")

    def vehicles(self, people: int) -> int:
        return max(1, math.ceil(people / (5 if self.mode == "self-driving" else 4)))


@dataclass(frozen=True)
class Leg:
    """A dated move between cities: day ``day`` (1-based) goes from ``origin`` to ``dest``."""

    day: int
    date: str
    origin: str
    dest: str

    @property
    def current_city(self) -> str:
        return f"from {self.origin} to {self.dest}"


@dataclass
class Catalog:
    restaurants: dict[str, list[Restaurant]] = field(default_factory=dict)  # normalised city -> entries
    attractions: dict[str, list[Attraction]] = field(default_factory=dict)
    accommodations: dict[str, list[Accommodation]] = field(default_factory=dict)
    flights: dict[tuple[str, str, str], list[Flight]] = field(default_factory=dict)  # (origin, dest, date) normalised
    ground: dict[tuple[str, str, str], Ground] = field(default_factory=dict)  # (mode, origin, dest) normalised
    legs: list[Leg] = field(default_factory=list)  # dated routes, in date order
    cities: dict[str, str] = field(default_factory=dict)  # normalised -> display name
    # table -> spelling -> entry
    _index: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    def find(self, table: str, name: str, city: str) -> Any | None:
        """The entry of ``table`` named ``name`` in ``city`` (case and whitespace insensitive)."""
        for entry in getattr(self, table).get(norm_city(city), []):
            if norm_name(entry.name) == norm_name(name):
                return entry
        return None

    def resolve(self, table: str, value: str) -> Any | None:
        """The entry of ``table`` whose exact spelling ``value`` is (``Name, City`` as the catalogue writes
        them, optionally with the city's US state appended, ``Name, City(State)``, as TravelPlanner's own
        plans write it); None for any other spelling (case, spacing, another suffix, a bare name)."""
        index = self._index.get(table)
        if index is None:
            index = self._index[table] = {e.value: e for entries in getattr(self, table).values() for e in entries}
        value = str(value)
        entry = index.get(value)
        if entry is None:
            m = _STATE_SUFFIX_EXACT.search(value)
            entry = index.get(value[:m.start()]) if m else None
        return entry

    def identify(self, table: str, value: str) -> Any | None:
        """The catalogue entry ``value`` means, however it is spelled (for duplicate detection, never for
        grounding): the exact spelling first, else the entry of that name (case and spacing aside, a
        ``Name, City`` or a bare ``Name``), preferring one in the named city; None when no entry has the name."""
        entry = self.resolve(table, value)
        if entry is not None:
            return entry
        name, sep, city = str(value).rpartition(",")
        candidates = []
        for n, c in ((name, city), (str(value), "")) if sep else ((str(value), ""),):
            candidates = [e for entries in getattr(self, table).values() for e in entries
                          if norm_name(e.name) == norm_name(n)]
            if candidates:
                city = c
                break
        city = norm_city(re.sub(r"\(.*?\)\s*$", "", city))
        return next((e for e in candidates if norm_city(e.city) == city), candidates[0] if candidates else None)

    def flights_for(self, origin: str, dest: str, date: str) -> list[Flight]:
        return self.flights.get((norm_city(origin), norm_city(dest), date), [])

    def ground_for(self, mode: str, origin: str, dest: str) -> Ground | None:
        return self.ground.get((mode, norm_city(origin), norm_city(dest)))


def _columns(header: str, names: Sequence[str], table: str) -> list[tuple[int, int]]:
    spans, pos, start = [], 0, 0
    for name in names:
        at = header.find(name, pos)
        if at < 0:
            raise CatalogError(f"{table}: header has no column '{name}'")
        end = at + len(name)
        spans.append((start, end))
        start = pos = end
    return spans


def parse_table(content: str, table: str) -> list[dict[str, str]]:
    """Rows of one fixed-width table as ``{header: cell}``; ``[]`` for 'No valid information'."""
    lines = [ln for ln in content.splitlines() if ln.strip()]
    if not lines or lines[0].startswith(("No valid", "There is no")):
        return []
    names = HEADERS[table]
    spans = _columns(lines[0], names, table)
    body = lines[1:]
    index_width = 0
    if table == "Restaurants" and body and all(re.match(r"\d+\s", ln) for ln in body):
        index_width = max(len(re.match(r"\d+", ln).group(0)) for ln in body)
    rows = []
    for ln in body:
        cells = {}
        for name, (a, b) in zip(names, spans):
            a = max(a, index_width)
            cell = ln[a:b] if name != names[-1] else ln[a:]
            # a right-aligned name keeps its own trailing space (``Peaceful, beautiful home away ``): that is its
            # spelling
            cells[name] = cell.lstrip() if name == names[0] and table != "Flight" and cell.strip() else cell.strip()
        rows.append(cells)
    return rows


def _num(text: str, default: float = float("nan")) -> float:
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return default


def _add(table: dict, key: Any, entry: Any) -> None:
    """Duplicate catalog rows (same name and city) keep the cheapest; the first otherwise."""
    bucket = table.setdefault(key, [])
    for i, old in enumerate(bucket):
        if norm_name(old.name) == norm_name(entry.name):
            if getattr(entry, "cost", getattr(entry, "price", 0)) < getattr(old, "cost", getattr(old, "price", 0)):
                bucket[i] = entry
            return
    bucket.append(entry)


def parse_reference(reference: str | Sequence[Mapping[str, str]], dates: Sequence[str]) -> Catalog:
    """The catalog of one row; ``dates`` are the trip's dates (day 1 first)."""
    if isinstance(reference, str):
        try:
            reference = ast.literal_eval(reference)
        except (ValueError, SyntaxError) as exc:
            raise CatalogError(f"reference_information is not a list literal: {exc}") from exc
    cat = Catalog()
    for block in reference:
        desc, content = str(block.get("Description", "")).strip(), str(block.get("Content", ""))
        kind = desc.split(" ", 1)[0]
        if kind in ("Attractions", "Restaurants", "Accommodations"):
            city = desc.split(" in ", 1)[1].strip()
            cat.cities.setdefault(norm_city(city), city)
            for row in parse_table(content, kind):
                _add_entity(cat, kind, row, city)
        elif kind == "Flight":
            m = DATED.match(desc)
            if not m:
                raise CatalogError(f"flight description without a date: {desc!r}")
            origin, dest, date = m.groups()
            if date not in dates:
                raise CatalogError(f"{desc!r}: date {date} is not one of the trip's dates {list(dates)}")
            cat.legs.append(Leg(day=list(dates).index(date) + 1, date=date, origin=origin, dest=dest))
            for row in parse_table(content, "Flight"):
                f = Flight(number=row["Flight Number"], price=_num(row["Price"]), dep=row["DepTime"],
                           arr=row["ArrTime"], date=row["FlightDate"], origin=origin, dest=dest)
                cat.flights.setdefault((norm_city(origin), norm_city(dest), date), []).append(f)
        elif kind in ("Self-driving", "Taxi"):
            m = GROUND.match(content.strip())
            if m:
                mode, origin, dest, duration, distance, cost = m.groups()
                cat.ground[(mode.lower(), norm_city(origin), norm_city(dest))] = Ground(
                    mode=mode.lower(), origin=origin, dest=dest, duration=duration, distance=distance, cost=float(cost))
            elif not UNDATED.match(desc):
                raise CatalogError(f"unrecognised ground route {desc!r}")
        else:
            raise CatalogError(f"unknown reference table {desc!r}")
    cat.legs.sort(key=lambda leg: leg.day)
    if not cat.legs:
        raise CatalogError("no dated flight descriptions: the route scaffold cannot be derived")
    return cat


def _add_entity(cat: Catalog, kind: str, row: Mapping[str, str], city: str) -> None:
    key = norm_city(city)
    if kind == "Restaurants":
        cuisines = tuple(c.strip() for c in row["Cuisines"].split(",") if c.strip())
        _add(cat.restaurants, key, Restaurant(name=row["Name"], city=city, cost=_num(row["Average Cost"]),
                                              cuisines=cuisines))
    elif kind == "Attractions":
        _add(cat.attractions, key, Attraction(name=row["Name"], city=city))
    else:
        rules = row["house_rules"] if row["house_rules"].lower() != "nan" else ""
        _add(cat.accommodations, key, Accommodation(
            name=row["NAME"], city=city, price=_num(row["price"]), room_type=row["room type"], house_rules=rules,
            min_nights=int(_num(row["minimum nights"], 1)), max_occupancy=int(_num(row["maximum occupancy"], 1))))


# ----- the route scaffold --------------------------------------------------------------------


@dataclass(frozen=True)
class DayPlan:
    """What the scaffold fixes for one day: a move (``leg``) or a stay in ``city``."""

    day: int
    leg: Leg | None
    city: str  # the stay city, or the destination of the move
    last: bool

    @property
    def current_city(self) -> str:
        return self.leg.current_city if self.leg else self.city

    @property
    def cities(self) -> tuple[str, ...]:
        """Cities where this day's meals and attractions may be."""
        return (self.leg.origin, self.leg.dest) if self.leg else (self.city,)


def route_scaffold(cat: Catalog, days: int, origin: str) -> list[DayPlan]:
    """Per day: the dated move that day, or a stay in the city reached by the latest move."""
    by_day = {leg.day: leg for leg in cat.legs}
    out, here = [], origin
    for d in range(1, days + 1):
        leg = by_day.get(d)
        if leg is not None:
            here = leg.dest
        out.append(DayPlan(day=d, leg=leg, city=here, last=d == days))
    return out


def iter_entities(cat: Catalog) -> Iterable[Any]:
    for table in (cat.restaurants, cat.attractions, cat.accommodations):
        for entries in table.values():
            yield from entries
