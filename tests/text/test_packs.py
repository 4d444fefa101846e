"""Every registered language pack is well formed, and a new pack extends the derived sets."""

from __future__ import annotations

import dataclasses
import re

import pytest
import snowballstemmer

from iris_consolidation import text
from iris_consolidation.text.languages import LEXICON, PACKS, Language, derive


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.code)
def test_a_pack_is_well_formed(pack: Language):
    assert re.fullmatch(r"[a-z]{2}", pack.code)
    for name, words in pack.word_lists().items():
        assert all(w == w.lower() and w == w.strip() and w for w in words), name
        if isinstance(words, tuple):
            assert len(set(words)) == len(words), f"{pack.code}.{name} repeats a word"
    if pack.spaces:
        assert not pack.script and not pack.grammar_chars
    else:
        assert re.compile(f"[{pack.script}]+").fullmatch("".join(pack.negations)), "markers outside the script"


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.code)
def test_no_word_of_a_pack_is_both_content_glue_and_a_negation(pack: Language):
    """A stop word is dropped from content; a negation or a negative verb is compared by
    polarity: a word in two of these lists would be read two ways."""
    lists = {
        "stopwords": set(pack.stopwords),
        "negations": set(pack.negations),
        "negative_verbs": set(pack.negative_verbs),
        "preference_words": set(pack.preference_words),
    }
    for a, words_a in lists.items():
        for b, words_b in lists.items():
            if a < b:
                assert not words_a & words_b, f"{pack.code}: {sorted(words_a & words_b)} in {a} and {b}"


@pytest.mark.parametrize("pack", [p for p in PACKS if p.stemmer], ids=lambda p: p.code)
def test_a_packs_stemmer_exists_and_stems(pack: Language):
    stemmer = snowballstemmer.stemmer(pack.stemmer)
    assert pack.stemmer in snowballstemmer.algorithms()
    assert stemmer.stemWord("a") == "a"
    words = [w for w in sorted(pack.stopwords | pack.preference_words) if w.isalpha()]
    assert all(stemmer.stemWord(w) for w in words)


def test_codes_are_unique_and_english_stems_every_word():
    assert len({p.code for p in PACKS}) == len(PACKS)
    assert PACKS[0].code == "en" and text.stem("cats") == "cat"
    with pytest.raises(ValueError, match="share a code"):
        derive([*PACKS, PACKS[0]])


def test_every_field_of_a_pack_is_read_by_the_lexicon():
    """A field no derived set reads would be a word list nothing uses."""
    derived = {f.name for f in dataclasses.fields(LEXICON)}
    unused = {
        f.name for f in dataclasses.fields(Language)
    } - derived - {"code", "stemmer", "spaces", "script", "grammar_chars", "min_piece", "change_events",
                   "marker_words", "marker_letters", "not_negations", "numerals", "numeral_scales",
                   "ordinal_prefix"}  # fmt: skip
    assert unused == set()


def test_a_new_pack_extends_the_derived_sets():
    dutch = Language(
        code="nl",
        stemmer="dutch",
        stopwords=frozenset({"het", "een"}),
        negations=frozenset({"niet", "geen"}),
        reported_changes=("nu",),
        time_ended=("vroeger",),
        cardinals={"drie": 3},
    )
    lexicon = derive([*PACKS, dutch])
    assert {"niet", "geen"} <= lexicon.negations and {"niet", "geen"} <= lexicon.frame_words
    assert {"het", "een"} <= lexicon.stopwords
    assert lexicon.reported_changes[-1] == "nu" and "nu" in lexicon.change_markers
    assert lexicon.time_ended[-1] == "vroeger"
    assert lexicon.cardinals["drie"] == 3
    assert lexicon.negations - {"niet", "geen"} == LEXICON.negations
    thai_like = Language(code="xx", spaces=False, script="\u1000-\u109f", negations=("\u1019",), min_piece=2)
    lexicon = derive([*PACKS, thai_like])
    assert lexicon.no_space_negations[-1] == "\u1019" and "\u1019" not in lexicon.negations
    assert lexicon.no_space_script.endswith("\u1000-\u109f") and ("\u1000-\u109f", 2) in lexicon.min_pieces


def test_the_registered_lexicon_is_derived_from_the_packs():
    assert derive(PACKS) == LEXICON
