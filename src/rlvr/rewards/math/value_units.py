"""The words a math answer may carry beside its value: units after it and a label before `=`.

math-verify drops the last `\\text{...}` of an answer as a unit, whatever it says, so a word that
qualifies the value (`5 \\text{ thousand}`, `5\\text{k}`, `5 \\text{ o más}`, `5\\text{-ish}`,
`5 \\text{ nope}`) would read as the bare value. A verifier must not read what it does not
understand, so text next to a value is read only where each of its words is known here (or
appears in the gold itself, see `known_word`); any other word makes the answer unreadable.

- Units (`UNIT_WORDS`, whole words, any case, plurals by `s`/`es`/`ies`): lengths, areas,
  volumes, masses, times, angles, temperatures, SI and common derived units, currencies and
  things a word problem counts (apples, people, ways, ...). `per`, `square`, `cubic` join them.
- Unit symbols (`UNIT_SYMBOLS`, exact case): `cm`, `kg`, `s`, `mL`, `Hz`, ... Symbols that
  are also multipliers are left out on purpose: `k`, `K`, `M`, `B`, `T` (thousand, million,
  billion, trillion as often as kelvin, molar, byte, tesla), and `mn`, `bn`, `mil`, `lakh`,
  `crore`, `quarter` and the like are unknown, so they make an answer unreadable rather than
  read as the bare number. A gold that writes such a unit (`300 K`) makes it known.
- Labels (`LABEL_WORDS`) name the quantity before `=` (`\\text{Area} = 5`).
Words that name another value or hedge (rlvr.rewards.math.notation.HEDGE_WORDS) are never
known, even where the gold holds them.
"""

from __future__ import annotations

_LENGTHS = (
    "meter metre centimeter centimetre millimeter millimetre kilometer kilometre micrometer "
    "micron nanometer decimeter inch foot feet yard mile furlong league lightyear parsec angstrom "
    "fathom"
)
_AREAS_VOLUMES = (
    "acre hectare liter litre milliliter millilitre centiliter deciliter kiloliter gallon quart "
    "pint cup teaspoon tablespoon barrel bushel"
)
_MASSES = "gram kilogram milligram microgram tonne ton pound ounce carat stone grain"
_TIMES = (
    "second sec minute hour day week fortnight month year decade century centuries millennium "
    "millisecond microsecond nanosecond"
)
_ANGLES_TEMPERATURES = "degree radian rad gradian steradian arcminute arcsecond celsius fahrenheit"
_DERIVED = (
    "newton joule watt kilowatt megawatt volt ampere amp ohm coulomb farad henry tesla weber "
    "hertz kilohertz megahertz gigahertz pascal kilopascal bar atmosphere atm kelvin mole mol "
    "calorie kilocalorie lumen lux candela becquerel gray sievert decibel byte kilobyte megabyte "
    "gigabyte terabyte bit pixel mph kph rpm knot"
)
_CURRENCIES = (
    "dollar cent penny pennies nickel dime euro pound yen yuan rupee peso franc ruble rouble "
    "lira rand krona krone dinar dirham riyal shekel baht"
)
# Things a word problem counts; a gold may name others, which are then known (`known_word`).
_COUNTED = (
    "unit time apple orange banana pear grape lemon peach cherry cherries fruit vegetable "
    "marble ball balloon block book page card coin stamp sticker candy candies cookie cake pie "
    "slice piece egg sandwich pizza cupcake muffin chocolate sweet toy doll pencil pen crayon "
    "eraser notebook student pupil child children kid boy girl man men woman women person people "
    "adult baby babies friend player team member worker employee teacher guest customer "
    "passenger visitor family families animal dog cat bird fish cow pig sheep goat horse chicken "
    "duck rabbit bee insect leg wheel tree flower plant seed leaf leaves box boxes bag basket "
    "bottle jar cup glass plate bowl chair table desk seat row column room floor house home "
    "building car bus truck bike bicycle train boat ticket game match round lap trip step stair "
    "way move handshake point vertex vertices edge face side diagonal angle triangle square "
    "rectangle circle cube digit number integer solution root pair term outcome arrangement "
    "combination permutation path route region line segment ray letter word sentence question "
    "problem prize gift present shirt sock shoe hat dress tile brick stone rock shell bead "
    "bracelet necklace ring song movie photo picture poster vote"
)
# Words that describe what is counted without changing how many (`3 \\text{ red marbles}`).
_DESCRIBING = (
    "red blue green yellow white black purple pink brown gray grey violet gold golden silver "
    "small big little large tall short long wide narrow full empty new old young hot cold "
    "identical distinct different same whole complete positive integral real of the in on at "
    "for with"
)
UNIT_WORDS = frozenset(
    " ".join(
        (_LENGTHS, _AREAS_VOLUMES, _MASSES, _TIMES, _ANGLES_TEMPERATURES, _DERIVED, _CURRENCIES)
        + (_COUNTED, _DESCRIBING, "per square cubic sq cu exact exactly total altogether each")
    ).split()
)
UNIT_SYMBOLS = frozenset(
    "m cm mm km nm dm um μm µm in ft yd mi g kg mg ug μg µg lb lbs oz t s ms ns min mins h hr "
    "hrs d wk yr yrs L l mL ml cL dL kL gal qt pt tsp tbsp deg rad sr N kN J kJ MJ W kW MW V mV "
    "kV A mA Ω kΩ C F H Wb Hz kHz MHz GHz Pa kPa MPa hPa atm bar mol mmol cal kcal lm lx cd "
    "dB KB kB MB GB TB px mph kph kmh rpm Å °C °F ° USD EUR GBP JPY CNY INR".split()
)
LABEL_WORDS = frozenset(
    "answer area volume perimeter circumference length width height depth base radius diameter "
    "side sum total product difference quotient remainder value result probability chance odds "
    "ratio rate mean median mode average range variance deviation speed velocity acceleration "
    "distance time cost price profit loss revenue number count score angle slope intercept "
    "initial final maximum minimum max min surface lateral x y z n k a b c the of".split()
)


def _singulars(word: str) -> set[str]:
    """`word` and the singulars it may be the plural of (`inches`, `candies`, `apples`)."""
    forms = {word}
    if word.endswith("ies"):
        forms.add(word[:-3] + "y")
    if word.endswith("es"):
        forms.add(word[:-2])
    if word.endswith("s"):
        forms.add(word[:-1])
    return forms


def known_word(word: str, extra: frozenset[str], *, label: bool = False) -> bool:
    """Whether `word` (as written) is a unit, a unit symbol, a label word (with `label`), or one
    of the `extra` words (lower case: the gold's own words)."""
    if word in UNIT_SYMBOLS:
        return True
    low = word.lower()
    if len(low) < 2 and not label:
        return low in extra
    forms = _singulars(low)
    vocabulary = UNIT_WORDS | LABEL_WORDS if label else UNIT_WORDS
    return bool(forms & (vocabulary | extra))
