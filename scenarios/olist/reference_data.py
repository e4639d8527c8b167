"""Fixed lookup data the Olist-shaped generator draws from: places, categories, months, texts.

Shares follow the real Olist extract loosely (São Paulo dominates, bed/bath/table is the top
category, purchases grow through 2017 and plateau in 2018); exact values are not claimed.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CATEGORIES",
    "MONTH_WEIGHTS",
    "REVIEW_MESSAGES",
    "REVIEW_TITLES",
    "SELLER_STATE_WEIGHTS",
    "STATES",
    "UNUSED_TRANSLATIONS",
]

STATES: Final[dict[str, tuple[float, tuple[str, ...], tuple[int, int]]]] = {
    # state: (customer weight, cities, zip-prefix range)
    "SP": (42.0, ("sao paulo", "campinas", "guarulhos", "santo andre", "sorocaba"), (1000, 19999)),
    "RJ": (13.0, ("rio de janeiro", "niteroi", "nova iguacu", "duque de caxias"), (20000, 28999)),
    "MG": (11.7, ("belo horizonte", "uberlandia", "contagem", "juiz de fora"), (30000, 39999)),
    "RS": (5.5, ("porto alegre", "caxias do sul", "pelotas"), (90000, 99999)),
    "PR": (5.0, ("curitiba", "londrina", "maringa"), (80000, 87999)),
    "SC": (3.7, ("florianopolis", "joinville", "blumenau"), (88000, 89999)),
    "BA": (3.4, ("salvador", "feira de santana", "vitoria da conquista"), (40000, 48999)),
    "DF": (2.1, ("brasilia",), (70000, 73699)),
    "ES": (2.0, ("vitoria", "vila velha", "serra"), (29000, 29999)),
    "GO": (2.0, ("goiania", "anapolis"), (72800, 76799)),
    "PE": (1.7, ("recife", "jaboatao dos guararapes"), (50000, 56999)),
    "CE": (1.3, ("fortaleza",), (60000, 63999)),
    "PA": (1.0, ("belem",), (66000, 68899)),
    "MT": (0.9, ("cuiaba",), (78000, 78899)),
    "MA": (0.8, ("sao luis",), (65000, 65999)),
    "MS": (0.7, ("campo grande",), (79000, 79999)),
    "PB": (0.5, ("joao pessoa",), (58000, 58999)),
    "PI": (0.5, ("teresina",), (64000, 64999)),
    "RN": (0.5, ("natal",), (59000, 59999)),
    "AL": (0.4, ("maceio",), (57000, 57999)),
    "SE": (0.3, ("aracaju",), (49000, 49999)),
    "TO": (0.3, ("palmas",), (77000, 77999)),
    "RO": (0.25, ("porto velho",), (76800, 76999)),
    "AM": (0.15, ("manaus",), (69000, 69299)),
    "AC": (0.08, ("rio branco",), (69900, 69999)),
    "AP": (0.07, ("macapa",), (68900, 68999)),
    "RR": (0.05, ("boa vista",), (69300, 69399)),
}

SELLER_STATE_WEIGHTS: Final[dict[str, float]] = {
    "SP": 60.0,
    "PR": 8.0,
    "MG": 8.0,
    "SC": 6.0,
    "RJ": 6.0,
    "RS": 4.0,
    "GO": 1.5,
    "DF": 1.5,
    "BA": 1.0,
    "ES": 1.0,
    "PE": 1.0,
    "CE": 0.5,
    "MT": 0.5,
    "MS": 0.5,
    "RN": 0.5,
}

CATEGORIES: Final[tuple[tuple[str, str | None, float], ...]] = (
    # Portuguese name, English translation (None: no translation row), product weight
    ("cama_mesa_banho", "bed_bath_table", 11.0),
    ("beleza_saude", "health_beauty", 9.0),
    ("esporte_lazer", "sports_leisure", 8.0),
    ("moveis_decoracao", "furniture_decor", 7.5),
    ("informatica_acessorios", "computers_accessories", 7.0),
    ("utilidades_domesticas", "housewares", 6.5),
    ("relogios_presentes", "watches_gifts", 6.0),
    ("telefonia", "telephony", 4.5),
    ("ferramentas_jardim", "garden_tools", 4.0),
    ("automotivo", "auto", 4.0),
    ("brinquedos", "toys", 3.8),
    ("cool_stuff", "cool_stuff", 3.5),
    ("perfumaria", "perfumery", 3.2),
    ("bebes", "baby", 2.8),
    ("eletronicos", "electronics", 2.5),
    ("papelaria", "stationery", 2.2),
    ("fashion_bolsas_e_acessorios", "fashion_bags_accessories", 1.8),
    ("pet_shop", "pet_shop", 1.7),
    ("moveis_escritorio", "office_furniture", 1.5),
    ("consoles_games", "consoles_games", 1.0),
    ("malas_acessorios", "luggage_accessories", 1.0),
    ("construcao_ferramentas_construcao", "construction_tools_construction", 0.8),
    ("eletrodomesticos", "home_appliances", 0.7),
    ("instrumentos_musicais", "musical_instruments", 0.6),
    ("livros_interesse_geral", "books_general_interest", 0.5),
    ("alimentos", "food", 0.5),
    ("pc_gamer", None, 0.3),
    ("portateis_cozinha_e_preparadores_de_alimentos", None, 0.3),
)

UNUSED_TRANSLATIONS: Final[tuple[tuple[str, str], ...]] = (
    # translation rows whose category no product uses (as in the real extract)
    ("seguros_e_servicos", "security_and_services"),
)

MONTH_WEIGHTS: Final[dict[tuple[int, int], float]] = {
    # (year, month): purchases per 100k orders, shaped like the real extract
    (2016, 9): 4,
    (2016, 10): 324,
    (2016, 12): 1,
    (2017, 1): 800,
    (2017, 2): 1780,
    (2017, 3): 2682,
    (2017, 4): 2404,
    (2017, 5): 3700,
    (2017, 6): 3245,
    (2017, 7): 4026,
    (2017, 8): 4331,
    (2017, 9): 4285,
    (2017, 10): 4631,
    (2017, 11): 7544,
    (2017, 12): 5673,
    (2018, 1): 7269,
    (2018, 2): 6728,
    (2018, 3): 7211,
    (2018, 4): 6939,
    (2018, 5): 6873,
    (2018, 6): 6167,
    (2018, 7): 6292,
    (2018, 8): 6512,
    (2018, 9): 16,
    (2018, 10): 4,
}

REVIEW_TITLES: Final[tuple[str, ...]] = (
    "recomendo",
    "otimo",
    "muito bom",
    "super recomendo",
    "nao recebi",
    "produto errado",
    "bom",
    "excelente",
)

REVIEW_MESSAGES: Final[tuple[str, ...]] = (
    "Produto chegou antes do prazo, muito bem embalado.",
    "Recebi tudo certinho, recomendo a loja.",
    "Ainda nao recebi o produto.",
    "Veio com defeito, estou aguardando a troca.",
    "Entrega rapida e produto de qualidade.",
    "Comprei dois itens e so chegou um.",
    "Produto conforme o anunciado.",
    "Demorou muito para chegar.",
    "Gostei muito, voltarei a comprar.",
    "A cor e diferente da foto.",
)
