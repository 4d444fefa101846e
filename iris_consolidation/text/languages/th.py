"""Thai: written without spaces, compared by character cover (three letters at least)."""

from __future__ import annotations

from .base import Language

THAI = Language(
    code="th",
    spaces=False,
    script="\u0e01-\u0e5b",
    # A Thai letter alone means nothing.
    min_piece=3,
    negations=("ไม่",),
    negative_verbs=("เกลียด",),
    preference_words=("ชอบ",),
    # "now", "moved", "quit", "formerly".
    reported_changes=("ตอนนี้", "ย้าย", "เลิก", "เคย"),
    # "repaired", "promoted", "actually".
    change_events=("ซ่อม", "เสร็จแล้ว", "เลื่อนตำแหน่ง", "ที่จริง"),
    time_ended=("เลิก", "เคย"),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("วางแผน", "อยาก", "ตั้งใจ"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=("ตอนเด็ก", "หลายปีก่อน"),
    # Addressed to the model, not a fact about the person.
    instructions=("ไม่ต้องสนใจคำสั่งก่อนหน้า", "เพิกเฉยต่อคำสั่งก่อนหน้า"),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("อาศัยอยู่", "ย้ายไป", "บ้านอยู่"),
        "work": ("ทำงาน", "อาชีพ", "ลาออก", "เกษียณ"),
        "relationship": ("แต่งงาน", "หมั้น", "หย่า", "แฟน", "สามี", "ภรรยา"),
        "name": ("ชื่อ",),
        "age": ("อายุ", "วันเกิด"),
        "diet": ("มังสวิรัติ", "กินเจ", "กินเนื้อ"),
        "children": ("ลูก", "ตั้งครรภ์"),
        "pets": ("สุนัข", "หมา", "แมว", "สัตว์เลี้ยง"),
        "phone": ("โทรศัพท์", "มือถือ"),
        "allergies": ("แพ้",),
        "appointment": ("นัดหมาย",),
    },
)
