"""Invented names from syllables, so that a model's memory cannot answer questions about the world.

All randomness comes from the `random.Random` passed in; names are unique within one :class:`NameForge`.
"""

from __future__ import annotations

import random

__all__ = ["NameForge"]

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t",
           "th", "v", "z", "sh", "q", "y", "c", "tr", "vr", "sk")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rn", "sk", "lt")
_CITY_SUFFIXES = ("holm", "mere", "vale", "stead", "wick", "gard", "port", "ford", "moor", "crest")
_COUNTRY_SUFFIXES = ("ia", "land", "mark", "ora", "avia", "esh")
_ORG_PATTERNS = (
    ("university", "{w} University"), ("university", "University of {c}"), ("press", "{w} Press"),
    ("press", "{w} House"), ("company", "{w} Works"), ("company", "{w} Industries"), ("guild", "{w} Guild"),
    ("institute", "{w} Institute"), ("observatory", "{c} Observatory"), ("society", "{w} Society"),
)
_WORK_NOUNS = ("Lantern", "Harbour", "Orchard", "Mirror", "Tide", "Compass", "Garden", "Winter", "Ember",
               "Archive", "Meridian", "Atlas", "Chorus", "Bridge", "Ledger", "Canticle", "Furnace", "Orbit",
               "Vessel", "Threshold", "Almanac", "Sonata", "Cipher", "Gallery")
_WORK_ADJ = ("Silent", "Amber", "Hollow", "Northern", "Distant", "Crimson", "Quiet", "Seventh", "Gilded",
             "Broken", "Patient", "Restless", "Pale", "Iron")
_WORK_PATTERNS = ("The {n} of {w}", "{w}'s {n}", "The {a} {n}", "{w} and the {n}", "A {n} for {w}", "{w}")


_ENGLISH = frozenset(w.lower() for w in (
    *_WORK_NOUNS, *_WORK_ADJ, "University", "of", "Press", "House", "Works", "Industries", "Guild", "Institute",
    "Observatory", "Society", "The", "and", "the", "A", "for"))


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


class NameForge:
    """Generates unique names per kind; `twin_of` makes a deliberately confusable variant of a name."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int | None = None) -> str:
        """One invented word of 2-3 syllables (pronounceable, capitalised)."""
        n = syllables or self.rng.choice((2, 2, 3))
        parts = []
        for i in range(n):
            coda = self.rng.choice(_CODAS) if i == n - 1 else self.rng.choice(_CODAS[:6])
            parts.append(self.rng.choice(_ONSETS) + self.rng.choice(_NUCLEI) + coda)
        return _cap("".join(parts))

    def _claim(self, make: object) -> str:
        for _ in range(1000):
            name = make()  # type: ignore[operator]
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name space exhausted; use more syllables")  # pragma: no cover

    def person(self) -> str:
        return self._claim(lambda: f"{self.word(2)} {self.word()}")

    def city(self) -> str:
        def make() -> str:
            base = self.word()
            return base + self.rng.choice(_CITY_SUFFIXES) if self.rng.random() < 0.4 else base
        return self._claim(make)

    def country(self) -> str:
        return self._claim(lambda: self.word(2) + self.rng.choice(_COUNTRY_SUFFIXES))

    def organisation(self, city_name: str) -> tuple[str, str]:
        """Returns (name, kind), e.g. ('Velmora Press', 'press')."""
        kind, pattern = self.rng.choice(_ORG_PATTERNS)
        name = self._claim(
            lambda: pattern.format(w=self.word(), c=city_name if self.rng.random() < 0.5 else self.word()))
        return name, kind

    def work(self) -> str:
        return self._claim(lambda: self.rng.choice(_WORK_PATTERNS).format(
            n=self.rng.choice(_WORK_NOUNS), a=self.rng.choice(_WORK_ADJ), w=self.word()))

    def twin_of(self, name: str) -> str | None:
        """A name one vowel or letter away from `name` (a distractor), or None if none is free."""
        vowels = "aeiou"
        positions, start = [], 0
        for word in name.split(" "):  # only touch invented words, never 'University' or 'Press'
            if word.lower().removesuffix("'s") not in _ENGLISH:
                positions += [start + i for i, ch in enumerate(word) if ch.lower() in vowels]
            start += len(word) + 1
        for _ in range(30):
            if not positions:
                break
            i = self.rng.choice(positions)
            repl = self.rng.choice([v for v in vowels if v != name[i].lower()])
            if name[i].isupper():
                repl = repl.upper()
            candidate = name[:i] + repl + name[i + 1:]
            if candidate.lower() not in self.used:
                self.used.add(candidate.lower())
                return candidate
        return None
