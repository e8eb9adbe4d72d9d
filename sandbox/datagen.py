"""Deterministic synthetic data: the same seed always yields the same banks, people and money."""

from __future__ import annotations

import hashlib
import random

FIRST_NAMES = ["Adaeze", "Babatunde", "Chiamaka", "Damilola", "Emeka", "Folake", "Gbenga",
               "Halima", "Ifeanyi", "Jumoke", "Kelechi", "Lola", "Musa", "Ngozi", "Olumide",
               "Funmilayo", "Tunde", "Uche", "Yetunde", "Zainab"]
LAST_NAMES = ["Adeyemi", "Okafor", "Balogun", "Eze", "Ibrahim", "Nwosu", "Okonkwo", "Adebayo",
              "Obi", "Bello", "Chukwu", "Afolabi", "Ogunleye", "Danjuma", "Nnamdi"]
ACCOUNT_TYPES = ["Savings", "Current"]

BANKS = [
    {"name": "Guaranty Trust Bank", "slug": "gtbank", "primary": "#dd4f05"},
    {"name": "Access Bank", "slug": "access-bank", "primary": "#f47920"},
    {"name": "First Bank of Nigeria", "slug": "firstbank", "primary": "#003b65"},
    {"name": "Zenith Bank", "slug": "zenith-bank", "primary": "#e30613"},
    {"name": "United Bank for Africa", "slug": "uba", "primary": "#d42e12"},
    {"name": "Kuda Microfinance Bank", "slug": "kuda", "primary": "#40196d"},
]
LOGIN_TYPES = ["bank", "mobile", "bvn", "account_number"]
PRODUCTS = ["auth", "identity", "accounts", "balance", "transactions", "income", "payment"]


def object_id(*parts: object) -> str:
    """24 lower-case hex characters, derived from the parts (so reproducible for a seed)."""
    return hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def bank_objects(seed: int) -> list[dict]:
    out = []
    for b in BANKS:
        bid = object_id(seed, "bank", b["slug"])
        out.append({
            "_id": bid,
            "id": bid,
            "name": b["name"],
            "slug": b["slug"],
            "colors": {"primary": b["primary"], "accent": "#ffffff", "bg": "#f5f5f5",
                       "button": b["primary"]},
            "logo": f"https://assets.sandbox.invalid/banks/{b['slug']}/logo.png",
            "icon": f"https://assets.sandbox.invalid/banks/{b['slug']}/icon.png",
            "v2_logo": f"https://assets.sandbox.invalid/banks/{b['slug']}/v2_logo.png",
            "v2_icon": f"https://assets.sandbox.invalid/banks/{b['slug']}/v2_icon.png",
            "status": "healthy",
            "login_types": LOGIN_TYPES,
            "products": PRODUCTS,
        })
    return out


def person(seed: int, customer_id: str) -> dict:
    rng = random.Random(object_id(seed, "person", customer_id))
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    return {"firstname": first, "lastname": last, "name": f"{first} {last}"}


def nuban(seed: int, account_id: str) -> str:
    rng = random.Random(object_id(seed, "nuban", account_id))
    return "".join(str(rng.randrange(10)) for _ in range(10))


def account_name_type(seed: int, account_id: str, owner: str) -> tuple[str, str]:
    rng = random.Random(object_id(seed, "account", account_id))
    kind = rng.choice(ACCOUNT_TYPES)
    return f"{owner} {kind}", kind
