"""Each invariant in English, Portuguese, Spanish, Chinese and Japanese, beside its
opposite-meaning twin: the merge that loses something is refused whatever the second look
would say (``refuse_signals=False``: the invariants alone), the one that keeps it passes."""

from __future__ import annotations

import pytest

from iris_consolidation.services.pipeline import validation as v
from tests.helpers import merge_all_codes

REASON = "One statement."


def _codes(contents: tuple[str, ...], content: str, reason: str = REASON) -> list[str]:
    return merge_all_codes(contents, content, reason, refuse_signals=False)


# (sources, a text that loses something, its twin that keeps it, the code of the loss)
CASES = {
    "number": [
        (("Keeps 3 hens", "Keeps three hens"), "Keeps hens", "Keeps three hens"),
        (("Cria 3 galinhas", "Cria três galinhas"), "Cria galinhas", "Cria três galinhas"),
        (("Cría 3 gallinas", "Cría tres gallinas"), "Cría gallinas", "Cría tres gallinas"),
        (("养了三只鸡", "养了3只鸡"), "养了鸡", "养了三只鸡"),
        (("鶏を三羽飼っている", "鶏を3羽飼っている"), "鶏を飼っている", "鶏を三羽飼っている"),
    ],
    "negation": [
        (("Does not drink milk", "Never drinks milk"), "Drinks milk", "Does not drink milk"),
        (("Não bebe leite", "Nunca bebe leite"), "Bebe leite", "Não bebe leite"),
        (("No bebe leche", "Nunca bebe leche"), "Bebe leche", "No bebe leche"),
        (("不喝牛奶", "从不喝牛奶"), "喝牛奶", "从不喝牛奶"),
        (("牛乳を飲まない", "牛乳は飲まない"), "牛乳を飲む", "牛乳を飲まない"),
    ],
    "words": [
        (("Swims in the lake at dawn", "Swims at dawn"), "Swims at dawn", "Swims in the lake at dawn"),
        (("Nada na lagoa de madrugada", "Nada de madrugada"), "Nada de madrugada", "Nada na lagoa de madrugada"),
        (("Nada en el lago al amanecer", "Nada al amanecer"), "Nada al amanecer", "Nada en el lago al amanecer"),
        (("清晨在湖里游泳", "清晨游泳"), "清晨游泳", "清晨在湖里游泳"),
        (("明け方に湖で泳ぐ", "明け方に泳ぐ"), "明け方に泳ぐ", "明け方に湖で泳ぐ"),
    ],
    "name": [
        (("Plays chess with Inês", "Plays chess with Inês every week"), "Plays chess every week", None),
        (("Joga xadrez com a Inês", "Joga xadrez com a Inês todas as semanas"), "Joga xadrez todas as semanas", None),
        (("Juega al ajedrez con Inés", "Juega al ajedrez con Inés cada semana"), "Juega al ajedrez cada semana", None),
        (("和Inês下棋", "每周和Inês下棋"), "每周下棋", None),
        (("Inêsとチェスをする", "毎週Inêsとチェスをする"), "毎週チェスをする", None),
    ],
}
CODES = {"number": v.Code.LOST_DETAIL, "negation": v.Code.LOST_NEGATION, "words": v.Code.LOST_WORDS}
LANGUAGES = ["en", "pt", "es", "zh", "ja"]


@pytest.mark.parametrize("language", range(5), ids=LANGUAGES)
@pytest.mark.parametrize("kind", ["number", "negation", "words"])
def test_a_text_that_loses_it_is_refused_and_its_twin_passes(kind, language):
    contents, loses, keeps = CASES[kind][language]
    assert _codes(contents, loses) == [CODES[kind]]
    assert _codes(contents, keeps) == []


@pytest.mark.parametrize("language", range(5), ids=LANGUAGES)
def test_a_name_is_never_lost(language):
    contents, loses, _ = CASES["name"][language]
    assert _codes(contents, loses) == [v.Code.LOST_DETAIL]
    assert _codes(contents, contents[1]) == []


@pytest.mark.parametrize(
    ("contents", "invented", "twin"),
    [
        (("Likes opera", "Enjoys opera"), "Does not like opera", "Likes opera"),
        (("Gosta de ópera", "Adora ópera"), "Não gosta de ópera", "Gosta de ópera"),
        (("Le gusta la ópera", "Disfruta la ópera"), "No le gusta la ópera", "Le gusta la ópera"),
        (("喜欢歌剧", "爱看歌剧"), "不喜欢歌剧", "喜欢歌剧"),
        (("オペラが好き", "オペラを楽しむ"), "オペラが好きではない", "オペラが好き"),
    ],
    ids=LANGUAGES,
)
def test_a_negation_no_member_states_is_refused(contents, invented, twin):
    reason = "enjoys = likes; adora = gosta; disfruta = gusta; 爱看 = 喜欢; 楽しむ = 好き"
    assert _codes(contents, invented, reason=reason) == [v.Code.INVENTED_NEGATION]
    assert _codes(contents, twin, reason=reason) == []


@pytest.mark.parametrize(
    ("contents", "content", "reason"),
    [
        (("Lives in Porto", "Vive no Porto"), "Lives in Porto", "vive = lives; no = in"),
        (("Trabalha no Porto", "Works in Porto"), "Trabalha no Porto", "works = trabalha; in = no"),
    ],
)
def test_a_portuguese_no_is_kept_by_the_synonym_the_judge_states(contents, content, reason):
    """"no" is "in the" in Portuguese: dropped with a stated synonym, nothing is lost."""
    assert _codes(contents, content, reason=reason) == []
    assert _codes(contents, content, reason="the same fact") != []
