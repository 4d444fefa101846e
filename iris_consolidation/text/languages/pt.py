"""Portuguese."""

from __future__ import annotations

from types import MappingProxyType

from .base import Language

PORTUGUESE = Language(
    code="pt",
    stemmer="portuguese",
    stopwords=frozenset(
        """o os as um uma é são está estão do da dos das na nas nos em ao aos à às com para pelo pela e
        tem têm tinha chamado chamada chamados chamadas""".split()
    ),
    articles=frozenset("um uma uns umas o os as".split()),
    marker_words=frozenset(
        "da das dos na nas nos num numa em um uma é ao à com não muito também agora ele ela mas ou pelo pela isso "
        "então".split()
    ),
    marker_letters="ãõç",
    # "Vive no Porto": "no" is "in the".
    not_negations=frozenset({"no"}),
    negations=frozenset({"não", "nunca", "nem", "jamais", "ninguém", "nenhum", "nenhuma", "sem"}),
    negative_verbs=frozenset("odeia odeio detesta detesto evita".split()),
    ended_negations=("já não",),
    preference_words=frozenset("gosta gosto gostam adora adoro prefere prefiro".split()),
    reported_changes=(
        "agora",
        "já não",
        "mudou",
        "mudou-se",
        "mudei",
        "saiu",
        "deixou",
        "trocou",
        "consertado",
        "consertada",
        "reparado",
        "reparada",
        "promovido",
        "promovida",
    ),  # fmt: skip
    # "started to", "actually", "I was wrong", "in the end".
    change_events=("passou a", "terminou", "concluiu", "na verdade", "me enganei", "enganei-me", "afinal"),
    time_ended=("já não", "deixou de", "costumava"),
    job_frames=("trabalha como",),
    phrase_equivalences=(
        ("pai de um menino", "filho"),
        ("mãe de um menino", "filho"),
        ("pai de uma menina", "filha"),
        ("mãe de uma menina", "filha"),
        ("antes do meio-dia", "manhã"),
    ),
    # "um" is also the article, "dez" no other word; cardinals that are no other common word.
    cardinals=MappingProxyType(
        {
            "dois": 2,
            "duas": 2,
            "três": 3,
            "quatro": 4,
            "cinco": 5,
            "seis": 6,
            "sete": 7,
            "oito": 8,
            "nove": 9,
            "dez": 10,
            "onze": 11,
            "quinze": 15,
            "vinte": 20,
        }
    ),  # fmt: skip
    conjunctions=frozenset("e ou".split()),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("planeja", "planeia", "pretende", "quer", "está a considerar", "está considerando", "atualmente"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=("em criança", "quando era criança", "quando era pequeno", "quando era pequena", "há anos"),
    # Addressed to the model, not a fact about the person.
    instructions=(
        "ignore todas as instruções anteriores",
        "ignora todas as instruções anteriores",
        "ignore as instruções anteriores",
    ),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("mora em", "mora no", "mora na", "vive em", "vive no", "vive na", "mudou-se", "mudou para",
                 "se mudou"),
        "work": ("trabalha", "emprego", "empregad*", "contratad*", "demitid*", "aposentad*", "profissão"),
        "relationship": ("casad*", "casou", "noiv*", "divorciad*", "namorad*", "marido", "esposa"),
        "name": ("chama-se", "se chama", "nome é"),
        "age": ("anos de idade", "aniversário", "nasceu"),
        "diet": ("vegetarian*", "vegan*", "come carne", "dieta"),
        "children": ("filhos", "grávida"),
        "pets": ("cachorro", "cão", "gato", "gata", "gatos", "cães", "cachorros", "animal de estimação"),
        "phone": ("telemóvel", "celular", "telefone"),
        "allergies": ("alérgic*", "alergia"),
        "appointment": ("consulta marcada",),
    },
)
