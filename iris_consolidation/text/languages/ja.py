"""Japanese: written without spaces, compared by character cover; hiragana is grammar."""

from __future__ import annotations

from types import MappingProxyType

from .base import Language

JAPANESE = Language(
    code="ja",
    spaces=False,
    # Kana and the iteration mark; kanji are the Han characters.
    script="\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
    # Hiragana (particles and endings) and the long-vowel mark.
    grammar_chars="\u3040-\u309f\u30fc",
    negations=("ない", "ません"),
    negative_verbs=("嫌い",),
    preference_words=("好き",),
    # "now", "no longer", "moved", "quit", "formerly".
    reported_changes=("今は", "もう", "引っ越", "辞め", "以前は"),
    # "repaired", "promoted", "actually", "correction".
    change_events=("修理", "終えた", "完成した", "昇進", "実は", "訂正"),
    time_ended=("もう", "辞め"),
    phrase_equivalences=(
        ("ジョギング", "ランニング"),
        ("昼前", "午前"),
    ),
    numerals=MappingProxyType(
        {
            "〇": 0,
            "零": 0,
            "一": 1,
            "二": 2,
            "三": 3,
            "四": 4,
            "五": 5,
            "六": 6,
            "七": 7,
            "八": 8,
            "九": 9,
        }
    ),  # fmt: skip
    numeral_scales=MappingProxyType({"十": 10, "百": 100, "千": 1000, "万": 10_000}),
    counters="歳回枚頭羽匹人台本件杯個日年月分時週間歩つ",
    ordinal_prefix="第",
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("予定", "つもり", "したい", "検討中"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=("子供の頃", "子どもの頃", "何年も前"),
    # Addressed to the model, not a fact about the person.
    instructions=("以前の指示をすべて無視", "これまでの指示を無視", "以前の指示を無視"),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("住んで", "引っ越", "在住"),
        "work": ("働いて", "勤めて", "勤務", "仕事", "退職", "転職"),
        "relationship": ("結婚", "婚約", "離婚", "彼女", "彼氏", "夫", "妻"),
        "name": ("名前",),
        "age": ("歳", "誕生日", "生まれ"),
        "diet": ("菜食", "ベジタリアン", "肉を食べ", "食事制限"),
        "children": ("子供", "子ども", "妊娠"),
        "pets": ("犬", "猫", "ペット"),
        "phone": ("携帯", "スマホ", "電話"),
        "allergies": ("アレルギー",),
        "appointment": ("予約",),
    },
)
