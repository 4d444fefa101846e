"""The offline extractor of the mine stage: explicit first-person statements only.

Pure functions, no model and no database. Conservative on purpose (rho's SOP: a
wrong memory costs more than a missed one): a sentence of a user's message becomes a
truth only when it *is* a plain first-person statement of a durable fact or
preference, in one of the shapes below, optionally introduced by a correction
("Actually, ...", "Correction: ...", "To be clear, ..."):

- identity and state: "I'm a nurse", "I am vegetarian", "I'm allergic to peanuts",
  "I'm from Lisbon", "I grew up in Ohio", "I was born in 1990", "My name is Ana";
- where and how they live or work: "I live in Berlin", "I live with my sister",
  "I work as a chef", "I work at the library";
- what they have: "I have two cats", "I have a son named Tomas" (family, pets and a
  short list of possessions only: "I have a few plans" is not a fact);
- preferences: "I love hiking", "I like to collect jerseys", "I prefer tea",
  "I hate mornings", "I play clarinet", "I don't eat meat", "My favorite color is red".

Everything else is skipped: questions, hypotheticals and wishes ("would", "if",
"want", "hope"), past events ("I went to ..."), objects that point at the
conversation ("I love that!", "I love your painting"), long or multi-clause objects.
Every truth found is of ``high`` confidence. The text is turned into the truths'
third-person, subject-less style ("Lives in Berlin", "Has two cats"); "my" becomes
"their".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The confidence of every rule extraction (an explicit statement, in the user's words).
CONFIDENCE = "high"
#: Longest object kept, in words: longer ones are clauses, not facts.
MAX_OBJECT_WORDS = 8

PHOTO = re.compile(r"\s*\[shares a photo[^\]]*\]")
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
CORRECTION = re.compile(
    r"^(?:actually|correction|to be clear|just to clarify|to clarify|for the record|no|sorry)\s*[,:;-]?\s+", re.I
)
FILLER = re.compile(r"^(?:yeah|yes|yep|well|oh|so|and|but|honestly|haha|lol|wow|hey|hi|ok|okay)\s*[,!.]?\s+", re.I)
CLAUSE_BREAK = re.compile(r"\s+[-\u2013\u2014]+\s+|\s*[\u2013\u2014]\s*|-\s+|;\s+|,\s+and\s+")
APOSTROPHE = str.maketrans({"\u2019": "'", "\u2018": "'"})

#: Words that make a sentence hypothetical, wishful, uncertain or about the conversation.
HEDGES = re.compile(
    r"\b(?:if|would|could|might|maybe|perhaps|probably|think|hope|wish|want|wanna|gonna|going to|"
    r"someday|one day|sometimes|kinda|sort of|guess|feel|felt|seems?|you|your|yours|we|our|us)\b",
    re.I,
)
#: Starts of objects that point at something in the conversation, not at a durable thing.
DEICTIC = re.compile(
    r"^(?:that|this|these|those|it|its|how|what|when|where|why|which|who|the|all|seeing|hearing|"
    r"watching|reading|talking|chatting|being|having|getting|knowing|here|there|so|too|such|some)\b",
    re.I,
)
#: Pronouns of the speaker inside an object: the clause is not a simple statement.
SELF_INSIDE = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|myself|mine)\b", re.I)
#: Pronouns and pointers to someone or something named elsewhere in the conversation.
OTHERS_INSIDE = re.compile(r"\b(?:he|she|him|her|his|hers|they|them|their|it|its|this|that|these|those|there)\b", re.I)
#: Last words that leave an object unfinished ("I love to!", "I'm a huge fan").
DANGLING = {"to", "of", "with", "and", "or", "the", "a", "an", "for", "about", "in", "on", "at", "fan", "fans", "one"}
FAMILY_OR_PET = (
    r"(?:son|sons|daughter|daughters|kid|kids|child|children|baby|babies|brother|brothers|sister|sisters|"
    r"husband|wife|partner|boyfriend|girlfriend|fiance|fiancee|twin|twins|grandchild|grandchildren|"
    r"dog|dogs|cat|cats|puppy|puppies|kitten|kittens|pet|pets|turtle|turtles|snake|snakes|horse|horses|"
    r"bird|birds|rabbit|rabbits|hamster|hamsters|fish|parrot|parrots|degree|masters|phd|car|cars|house|"
    r"apartment|allergy|allergies)"
)
COUNT = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+)"

#: (pattern over the statement, third-person template, kind). ``{o}`` is the object.
PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^my name is (?P<o>[A-Z][\w'-]*(?: [A-Z][\w'-]*)?)$"), "Is named {o}", "fact"),
    (re.compile(r"^my (?P<o>(?:favorite|favourite) [\w -]+? is .+)$", re.I), "Their {o}", "preference"),
    (re.compile(r"^i(?:'m| am) (?P<o>(?:vegan|vegetarian|pescatarian|married|single|divorced|widowed|engaged|"
                r"retired|pregnant|left-handed|right-handed|lactose intolerant|allergic to .+))$", re.I),
     "Is {o}", "fact"),
    (re.compile(r"^i(?:'m| am) (?P<o>from .+)$", re.I), "Is {o}", "fact"),
    (re.compile(r"^i(?:'m| am) (?P<o>(?:a|an) (?!bit\b|little\b|lot\b|mess\b|wreck\b|sucker\b|fan\b(?! of)).+)$",
                re.I), "Is {o}", "fact"),
    (re.compile(r"^i (?P<v>grew up|was born) (?P<o>(?:in|on) .+)$", re.I), "{V} {o}", "fact"),
    (re.compile(r"^i live (?P<o>(?:in|with|near|on) .+)$", re.I), "Lives {o}", "fact"),
    (re.compile(r"^i work (?P<o>(?:as|at|for|in) .+)$", re.I), "Works {o}", "fact"),
    (re.compile(rf"^i(?: have|'ve got) (?P<o>{COUNT} (?:[\w-]+ )?{FAMILY_OR_PET}\b.*)$", re.I), "Has {o}", "fact"),
    (re.compile(r"^i (?P<v>love|like|enjoy|prefer|hate|adore|dislike) (?P<o>.+)$", re.I), "{V}s {o}", "preference"),
    (re.compile(r"^i play (?P<o>(?:the )?[\w-]+(?: [\w-]+)?)$", re.I), "Plays {o}", "preference"),
    (
        re.compile(r"^i (?:don't|do not|never) (?P<v>eat|drink|smoke) (?P<o>.+)$", re.I),
        "Does not {v} {o}",
        "preference",
    ),
)


@dataclass(frozen=True, kw_only=True)
class Extracted:
    """One truth found in one message: ``content`` in the truths' style, ``kind``,
    ``confidence`` (always ``high`` here), the ``evidence`` message id, the ``reason``
    (which statement it came from)."""

    content: str
    kind: str
    confidence: str
    evidence: tuple[str, ...]
    reason: str


def sentences(text: str) -> list[str]:
    """The sentences of a message, photo captions removed, apostrophes made plain."""
    text = PHOTO.sub("", text.translate(APOSTROPHE))
    return [s.strip() for s in SENTENCE.split(text) if s.strip()]


def _statement(sentence: str) -> tuple[str, bool] | None:
    """The sentence without its fillers and correction marker, and whether it was a
    correction; None for a question."""
    if sentence.endswith("?"):
        return None
    text, correction = sentence, False
    for _ in range(3):
        stripped = CORRECTION.sub("", text, count=1)
        if stripped != text:
            correction, text = True, stripped
            continue
        stripped = FILLER.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    # The first of independent clauses joined by a dash, "; " or ", and": the second
    # adds a comment ("I'm a big fan of pottery - the skill is awesome"). Never at
    # "but", "unless", "except": those qualify the first clause.
    text = CLAUSE_BREAK.split(text, maxsplit=1)[0]
    return text.rstrip(" .!"), correction


def _tidy_object(obj: str) -> str:
    """``obj`` without a leading "also" and a trailing "too", "as well" or "also"."""
    obj = re.sub(r"^also\s+", "", obj.strip(), flags=re.I)
    return re.sub(r"\s+(?:too|as well|also)$", "", obj, flags=re.I).strip()


def _object_ok(obj: str, *, max_words: int = MAX_OBJECT_WORDS) -> bool:
    words = obj.split()
    return (
        0 < len(words) <= max_words
        and not DEICTIC.match(obj)
        and not SELF_INSIDE.search(obj)
        and not OTHERS_INSIDE.search(obj)
        and words[-1].lower() not in DANGLING
        and not re.search(r"[,;:()\"]|\s-\s|--|\u2014|!", obj)
    )


def extract_statement(sentence: str) -> tuple[str, str, bool] | None:
    """``(content, kind, was_correction)`` for one sentence, or None when it is not one
    of the module's statement shapes (see the module docstring)."""
    parsed = _statement(sentence)
    if parsed is None:
        return None
    text, correction = parsed
    if HEDGES.search(text):
        return None
    for pattern, template, kind in PATTERNS:
        match = pattern.match(text)
        if match is None:
            continue
        obj = _tidy_object(match.group("o"))
        # "My favorite X is Y" holds its subject in the object: a few more words.
        if not _object_ok(obj, max_words=MAX_OBJECT_WORDS + (3 if template.startswith("Their") else 0)):
            return None
        obj = re.sub(r"\bmy\b", "their", obj, flags=re.I)
        verb = match.groupdict().get("v") or ""
        content = template.format(o=obj, V=verb.capitalize(), v=verb.lower())
        content = content[0].upper() + content[1:]
        return content, kind, correction
    return None


def extract(messages: list[tuple[str, str]]) -> list[Extracted]:
    """Truths from ``messages`` (``(message id, text)``, the user's own messages only,
    in order); one per distinct content, the first message that states it as evidence
    (a later one that states it again is added to the evidence)."""
    found: dict[str, Extracted] = {}
    for message_id, text in messages:
        for sentence in sentences(text):
            result = extract_statement(sentence)
            if result is None:
                continue
            content, kind, correction = result
            key = content.lower()
            if key in found:
                item = found[key]
                if message_id not in item.evidence:
                    found[key] = Extracted(
                        content=item.content, kind=item.kind, confidence=item.confidence,
                        evidence=(*item.evidence, message_id), reason=item.reason,
                    )
                continue
            how = "a correction" if correction else "an explicit first-person statement"
            found[key] = Extracted(
                content=content, kind=kind, confidence=CONFIDENCE, evidence=(message_id,),
                reason=f"{how}: {sentence[:200]!r}",
            )
    return list(found.values())
