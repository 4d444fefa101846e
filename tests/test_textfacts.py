"""``textfacts``: the pure text functions the rule judge and the validator rely on."""

from __future__ import annotations

import pytest

from iris_consolidation import textfacts

# --- normalise and tokens ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm a nurse.", "i am a nurse"),
        ("I’m a NURSE!!", "i am a nurse"),
        ("  Works   as\ta nurse  ", "works as a nurse"),
        ("Can't swim", "can not swim"),
        ("cannot swim", "can not swim"),
        ("Won't fly", "will not fly"),
        ("Doesn't like coffee", "does not like coffee"),
        ("They've got 2 cats; she'll adopt a 3rd", "they have got 2 cats she will adopt a 3 rd"),
        ("Jean-Luc likes crème brûlée", "jean-luc likes crème brûlée"),
        ("Met at 3:30pm on 1990-05-03, paid 1,000.50", "met at 3:30 pm on 1990-05-03 paid 1,000.50"),
        ("ﬁne ＡＢＣ", "fine abc"),
        ("", ""),
        ("!!! ... ???", ""),
    ],
)
def test_normalise(text, expected):
    assert textfacts.normalise(text) == expected


def test_two_spellings_of_one_statement_normalise_equal():
    assert textfacts.normalise("I'm a nurse.") == textfacts.normalise("i am a NURSE")
    assert textfacts.normalise("Doesn’t eat meat") == textfacts.normalise("does not eat meat!")


def test_tokens_keep_their_order():
    assert textfacts.tokens("Alice manages Bob") == ["alice", "manages", "bob"]
    assert textfacts.tokens("Bob manages Alice") == ["bob", "manages", "alice"]


# --- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Has 2 cats", {"2"}),
        ("Has two cats and 3 dogs", {"2", "3"}),
        ("Born 1990-05-03 at 3:30, weighs 3.5 kg, owns 1,000 books", {"1990-05-03", "3:30", "3.5", "1000"}),
        ("Second child, born on the 2nd", {"2nd"}),
        ("Has twenty-one cats", {"21"}),
        ("Holds one-on-one meetings", set()),
        ("Is well-known and someone", set()),
        ("Likes tea", set()),
    ],
)
def test_numbers(text, expected):
    assert textfacts.numbers(text) == expected


def test_hyphenated_number_words_tell_quantities_apart():
    assert textfacts.numbers("Has twenty-one cats") != textfacts.numbers("Has twenty-two cats")


# --- proper names and dates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Alice manages Bob", ["bob"]),
        ("Bob manages Alice", ["alice"]),
        ("I love Paris", ["paris"]),
        ("The dog of Anna", ["anna"]),
        ("He moved to Berlin in May", ["berlin", "may"]),
        ("Met O'Brien on Monday", ["o'brien", "monday"]),
        ("iPhone broke. Then Anna called", ["iphone", "anna"]),
        ("Jean-Luc cooks", ["jean-luc"]),
        ("works as a nurse", []),
        ("", []),
    ],
)
def test_proper_names_in_order(text, expected):
    assert textfacts.proper_names(text) == expected


def test_a_sentence_initial_word_is_a_name_only_where_the_cluster_names_it_elsewhere():
    """A first word is capitalised anyway; it counts as a name when another text of the
    cluster uses it inside a sentence (``known``), so role swaps keep both names in order."""
    known = textfacts.known_names(["Alice manages Bob", "Bob manages Alice"])
    assert known == {"alice", "bob"}
    assert textfacts.proper_names("Alice manages Bob", known=known) == ["alice", "bob"]
    assert textfacts.proper_names("Bob manages Alice", known=known) == ["bob", "alice"]
    assert textfacts.proper_names("Moved to Berlin") == ["berlin"]
    assert textfacts.proper_names("Moved to Berlin", known=frozenset({"moved"})) == ["moved", "berlin"]


def test_known_names_leave_out_sentence_initial_words():
    assert textfacts.known_names(["Met Anna", "Anna met Bob. Cara left"]) == {"anna", "bob"}


def test_dates_are_month_and_weekday_names():
    assert textfacts.dates("Met on Monday, 3 May; back in sept") == {"monday", "may", "sept"}
    assert textfacts.dates("Likes tea") == set()


# --- negation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("Likes coffee", False),
        ("Does not like coffee", True),
        ("Doesn't like coffee", True),
        ("Doesn’t like coffee", True),
        ("Never drinks coffee", True),
        ("No longer lives in Lisbon", False),  # a state that ended: ``time_ended``
        ("Dislikes coffee", True),
        ("hates coffee", True),
        ("Lives without a car", True),
        ("Never says no", False),
        ("Is not without friends", False),
        ("Lives in Nottingham and is notable", False),
        ("Knows nobody there", True),
        ("", False),
    ],
)
def test_polarity(text, negated):
    assert textfacts.polarity(text) is negated


def test_negations_lists_the_negation_words():
    assert textfacts.negations("Never says no to tea") == {"never", "no"}
    assert textfacts.negations("Likes tea") == set()


# --- details and contains_detail -----------------------------------------------------------------


def test_details_gather_numbers_dates_and_names_lower_case():
    assert textfacts.details("Met Anna on 3 May 2023 with two friends") == {"anna", "3", "may", "2023", "2"}
    assert textfacts.details("Met Anna on 3 May", known=frozenset({"met"})) == {"met", "anna", "3", "may"}


@pytest.mark.parametrize(
    ("text", "detail", "found"),
    [
        ("Has 2 cats", "2", True),
        ("Has 12 cats", "2", False),
        ("Has 2.5 cats", "2", False),
        ("Paid 1.2 euros", "2", False),
        ("Has 2, maybe 3 cats", "2", True),
        ("Born on the 2nd", "2nd", True),
        ("Born on the 2nd", "2", False),
        ("Meets at 3:30pm", "3:30", True),
        ("Meets at 13:30", "3:30", False),
        ("Owns 1,000,000 books", "1000", False),
        ("Owns a thousand books", "1000", True),
        ("Born 1990-05-03", "1990-05-03", True),
        ("Lives in Berlin", "berlin", True),
        ("Lives in BERLIN", "berlin", True),
        ("Drives a Berlingo", "berlin", False),
        ("Met Jean-Luc's mother", "jean-luc", True),
        ("Met O’Brien", "o'brien", True),
        ("Has twenty-one cats", "21", True),
        ("Has twenty-two cats", "21", False),
        ("", "2", False),
    ],
)
def test_contains_detail_matches_whole_words_and_whole_numbers(text, detail, found):
    assert textfacts.contains_detail(text, detail) is found


def test_every_detail_of_a_text_is_contained_in_that_text():
    text = "Met Anna and Jean-Luc on 3 May 2023 at 3:30, paid 1,000.50 for twenty-one tickets"

    assert all(textfacts.contains_detail(text, d) for d in textfacts.details(text))


# --- languages without spaces, content words kept, reported changes --------------------


def test_thai_and_devanagari_marks_stay_in_their_word():
    """Without its tone mark, "ไม่" (not) would be "ไม้" (wood)."""
    assert textfacts.normalise("ไม่ชอบกาแฟ") != textfacts.normalise("ไม้ชอบกาแฟ")
    assert textfacts.tokens("हिन्दी बोलता है") == ["हिन्दी", "बोलता", "है"]


@pytest.mark.parametrize(
    ("run", "haystack", "expected"),
    [
        ("周末在河边的公园遛狗", "周末遛狗", ["在河边的公园"]),
        ("周末遛狗", "周末在河边的公园遛狗", []),
        ("週末に川沿いの公園で犬を散歩させる", "週末に犬を散歩させる", ["川沿いの公園で"]),
        ("週末に犬を散歩させる", "週末は犬を散歩させます", []),  # particles and endings are grammar
        ("พาสุนัขไปเดินเล่นที่สวนริมแม่น้ำ", "พาสุนัขไปเดินเล่น", ["ที่สวนริมแม่น้ํา"]),
        ("", "anything", []),
    ],
)
def test_uncovered_pieces_of_a_run(run, haystack, expected):
    run = textfacts.normalise(run)
    assert textfacts.uncovered(run, textfacts.normalise(haystack)) == expected


@pytest.mark.parametrize(
    ("member", "content", "reason", "lost"),
    [
        (
            "Left St Mary's and now works night shifts at a hospice",
            "Works as a nurse at St Mary's",
            "",
            ["hospic", "left", "night", "shift"],
        ),
        ("Is the father of a boy called Tomas", "Has a son named Tomas", "", []),
        ("Tomas is the user's father", "Has a son named Tomas", "", ["father"]),
        ("Is the father of a girl called Tomas", "Has a son named Tomas", "", ["father", "girl"]),
        ("Is the father of a boy called Tomas", "Has a son named Tomas", "'father of a boy' = 'son'", []),
        ("Works as a nurse at Lakeside", "Is a nurse at Lakeside", "", []),
        ("Doesn't like jazz", "Hates jazz", "", []),
        ("Was born on March 14", "Birthday is on 14 March", "", []),
        ("Tem três gatos", "Tem 3 gatos", "", []),
        ("周末在河边的公园遛狗", "周末遛狗", "", ["在河边的公园"]),
        (
            "周末在河边的公园遛狗",
            "Walks the dog by the river in the park at the weekend",
            "'周末在河边的公园遛狗' = 'walks the dog by the river in the park at the weekend'",
            [],
        ),
    ],
)
def test_lost_words(member, content, reason, lost):
    assert textfacts.lost_words(member, content, reason=reason) == lost


def test_equivalences_read_words_and_quoted_phrases():
    assert textfacts.equivalences(
        'Same: "father of a boy" = "son"; gatos = cats, alérgica means allergic, 猫 -> cat'
    ) == [
        ("father of a boy", "son"),
        ("gatos", "cats"),
        ("alérgica", "allergic"),
        ("猫", "cat"),
    ]
    assert textfacts.equivalences("They are the same fact.") == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Hates jazz", (True, False)),
        ("Doesn't like jazz", (True, False)),
        ("Can't stand jazz", (True, False)),
        ("Avoids sugar", (True, False)),
        ("Does not hate jazz", (False, True)),
        ("Likes jazz", (False, False)),
        ("Doesn't smoke anymore", (False, False)),
        ("Não gosta de café", (True, False)),
        ("Vive na cidade do Porto", (False, False)),
        ("不喜欢咖啡", (True, False)),
        ("讨厌咖啡", (True, False)),
        ("コーヒーが嫌いだ", (True, False)),
        ("ไม่ชอบกาแฟ", (True, False)),
    ],
)
def test_polarity_key_counts_negative_verbs_in_several_languages(text, key):
    assert textfacts.polarity_key(text) == key


@pytest.mark.parametrize(
    ("text", "ended", "changed"),
    [
        ("Used to smoke", True, True),
        ("Quit smoking", True, True),
        ("Gave up smoking", True, True),
        ("Já não fuma", True, True),
        ("不再抽烟", True, True),
        ("Now works at a hospice", False, True),
        ("Agora trabalha num lar", False, True),
        ("现在住在杭州", False, True),
        ("Smokes", False, False),
        ("抽烟", False, False),
    ],
)
def test_ended_and_changed_states_in_several_languages(text, ended, changed):
    assert (textfacts.time_ended(text), textfacts.reports_change(text)) == (ended, changed)


def test_tokens_of_each_is_tokens_of_every_text():
    texts = ["I can't go", "won't", "Σίσυφος ΟΔΟΣ", "在Birch工作", "Co当会计", "e\u0301", "\u0301start", "ไม่ ไม้",
             "I'm a nurse.", "x'd", "’ll be", "", " ", "1.2.3-4", "ﬁne ①", "ΟΔΟΣ\n- two", "isn't", "a\x00b"]
    for order in (texts, texts[::-1], texts[:-1]):
        assert textfacts.tokens_of_each(order) == [textfacts.tokens(t) for t in order]
    assert textfacts.tokens_of_each([]) == []
