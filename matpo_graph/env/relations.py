"""The relation vocabulary of the embedded world: how each fact is stated, asked and referred to.

Every relation is functional (one value per subject), so a chain of relations from a start entity has
exactly one answer. `{s}` is the subject, `{o}` the object (an entity name or an attribute value).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INFOBOX_LABELS", "KINDS", "RELATIONS", "Relation", "relations_from"]

KINDS: tuple[str, ...] = ("person", "city", "country", "organisation", "work")


@dataclass(frozen=True)
class Relation:
    """A typed fact. `target` is an entity kind, or None for an attribute (a year, a word)."""

    name: str
    source: str
    target: str | None
    questions: tuple[str, ...]
    """Direct questions about {s}; the first is the canonical sub-question."""
    phrases: tuple[str, ...]
    """Noun phrases denoting the object, used to nest this hop inside a longer question."""
    sentences: tuple[str, ...]
    """Ways a page states the fact."""

    @property
    def is_attribute(self) -> bool:
        return self.target is None


RELATIONS: dict[str, Relation] = {r.name: r for r in (
    Relation("written_by", "work", "person",
             ("Who wrote {s}?", "Who is the author of {s}?"),
             ("the author of {s}", "the writer of {s}"),
             ("{s} was written by {o}.", "{o} is the author of {s}.", "The author of {s} is {o}.")),
    Relation("published_by", "work", "organisation",
             ("Which organisation published {s}?", "Who published {s}?"),
             ("the publisher of {s}", "the organisation that published {s}"),
             ("{s} was published by {o}.", "{o} published {s}.", "The first edition of {s} was issued by {o}.")),
    Relation("born_in", "person", "city",
             ("In which city was {s} born?", "Where was {s} born?"),
             ("the birthplace of {s}", "the city where {s} was born"),
             ("{s} was born in the city of {o}.", "{s} is a native of {o}.", "The birthplace of {s} is {o}.")),
    Relation("works_for", "person", "organisation",
             ("Which organisation did {s} work for?", "Who employed {s}?"),
             ("the employer of {s}", "the organisation that employed {s}"),
             ("{s} worked for {o}.", "{s} spent most of a long career at {o}.", "{o} employed {s} for many years.")),
    Relation("founded_by", "organisation", "person",
             ("Who founded {s}?", "Who established {s}?"),
             ("the founder of {s}", "the person who founded {s}"),
             ("{s} was founded by {o}.", "{o} established {s}.", "The founder of {s} was {o}.")),
    Relation("headquartered_in", "organisation", "city",
             ("In which city is {s} headquartered?", "Where is {s} based?"),
             ("the city where {s} is headquartered", "the home city of {s}"),
             ("{s} is headquartered in {o}.", "The headquarters of {s} are in {o}.", "{s} is based in {o}.")),
    Relation("located_in", "city", "country",
             ("In which country is {s} located?", "Which country is {s} in?"),
             ("the country where {s} lies", "the country that contains {s}"),
             ("{s} is a city in {o}.", "{s} lies in {o}.", "{s} is located in the country of {o}.")),
    Relation("capital", "country", "city",
             ("What is the capital of {s}?", "Which city is the capital of {s}?"),
             ("the capital of {s}", "the capital city of {s}"),
             ("The capital of {s} is {o}.", "{o} serves as the capital of {s}.",
              "{s} is governed from its capital, {o}.")),
    Relation("mayor", "city", "person",
             ("Who is the mayor of {s}?", "Who governs {s} as mayor?"),
             ("the mayor of {s}", "the person who is mayor of {s}"),
             ("{o} is the mayor of {s}.", "The mayor of {s} is {o}.", "{s} is led by its mayor, {o}.")),
    Relation("birth_year", "person", None,
             ("In what year was {s} born?", "When was {s} born?"),
             ("the birth year of {s}",),
             ("{s} was born in the year {o}.", "Born in {o}, {s} grew up far from the public eye.",
              "{s} (born {o}) is remembered by many.")),
    Relation("occupation", "person", None,
             ("What was the profession of {s}?", "What did {s} do for a living?"),
             ("the profession of {s}",),
             ("{s} worked as {a} {o}.", "By profession, {s} was {a} {o}.", "{s} was {a} {o} by trade.")),
    Relation("founded_year", "organisation", None,
             ("In what year was {s} founded?", "When was {s} established?"),
             ("the founding year of {s}",),
             ("{s} was founded in {o}.", "{s} has existed since {o}.", "The year {o} saw the founding of {s}.")),
    Relation("settled_year", "city", None,
             ("In what year was {s} first settled?", "When was {s} first settled?"),
             ("the year {s} was first settled",),
             ("{s} was first settled in {o}.", "Settlers arrived in {s} in {o}.",
              "The first houses of {s} were built in {o}.")),
    Relation("publication_year", "work", None,
             ("In what year was {s} published?", "When was {s} first published?"),
             ("the publication year of {s}",),
             ("{s} first appeared in {o}.", "{s} was published in the year {o}.", "Readers first saw {s} in {o}.")),
    Relation("genre", "work", None,
             ("What kind of work is {s}?", "What genre is {s}?"),
             ("the genre of {s}",),
             ("{s} is {a} {o}.", "Critics describe {s} as {a} {o}.", "{s} belongs to the {o} genre.")),
    Relation("currency", "country", None,
             ("What is the currency of {s}?", "Which currency is used in {s}?"),
             ("the currency of {s}",),
             ("The currency of {s} is the {o}.", "People in {s} pay with the {o}.", "{s} uses the {o} as its money.")),
)}


INFOBOX_LABELS: dict[str, str] = {
    "written_by": "Author", "published_by": "Publisher", "born_in": "Born in", "works_for": "Employer",
    "founded_by": "Founder", "headquartered_in": "Headquarters", "located_in": "Country", "capital": "Capital",
    "mayor": "Mayor", "birth_year": "Born", "occupation": "Occupation", "founded_year": "Founded",
    "settled_year": "First settled", "publication_year": "Published", "genre": "Genre", "currency": "Currency",
}
"""The infobox row label under which a page lists each relation (a question's decomposition names it too)."""


def relations_from(kind: str, *, entity_only: bool = False) -> list[Relation]:
    """Relations whose subject is of `kind`, in table order (stable)."""
    return [r for r in RELATIONS.values() if r.source == kind and not (entity_only and r.is_attribute)]
